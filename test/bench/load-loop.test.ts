import assert from "node:assert/strict";
import { describe, it } from "node:test";
import {
  type BenchClient,
  retryable,
  StepError,
  type StepFlags,
} from "../../src/bench/clients/bench-client.ts";
import { NOT_SENT, runLoad } from "../../src/bench/load-loop.ts";
import type { Workload } from "../../src/bench/workload.ts";
import type { Tensor } from "../../src/core/tensor.ts";

// The open loop against a server far slower than the rate asked for: one lane, 100
// requests/s for 0.2 s (20 slots), and a client that takes 40 ms per request. The lane
// goes on sending the window's slots after it closes, for another window's length, and
// counts the ones it never sent as failed: every slot of the window is accounted for,
// answered or failed, and none is silently dropped.

const workload = { step: () => new Map<string, Tensor>() } as unknown as Workload;

function slowClient(flagsSeen: StepFlags[]): BenchClient {
  return {
    async step(_sequence, _inputs, flags) {
      flagsSeen.push(flags);
      await new Promise((resolve) => setTimeout(resolve, 40));
      return new Map();
    },
    async close() {},
  };
}

const options = {
  lanes: 1,
  rate: 100,
  seconds: 0.2,
  warmupSeconds: 0,
  idBase: 1n,
  keepOutputs: false,
};

describe("runLoad, open loop behind schedule", () => {
  it("accounts for every slot of the window: answered, or failed as not sent", async () => {
    const { recorder } = await runLoad(slowClient([]), workload, { ...options, sequenceLength: undefined });
    const unsent = recorder.errors.get(NOT_SENT) ?? 0;
    assert.ok(unsent > 0, "a 40 ms client cannot keep 100 requests/s");
    assert.equal(recorder.count + unsent, 20);
    assert.equal(recorder.failures, unsent);
  });

  it("counts as its throughput the answers that came inside the window, not those of its slots answered later", async () => {
    const { recorder, seconds, answeredInWindow } = await runLoad(slowClient([]), workload, {
      ...options,
      sequenceLength: undefined,
    });
    // One lane, one request at a time, each at least 40 ms: at most 6 answers in 0.2 s. The
    // window's slots answered after it closed (counted in the latencies) are more.
    assert.equal(seconds, options.seconds);
    assert.ok(answeredInWindow >= 1 && answeredInWindow <= 7, `${answeredInWindow} answers in the window`);
    assert.ok(recorder.count > answeredInWindow, `${recorder.count} latencies`);
  });

  it("a sequence model's open sequence is still ended when the lane gives up", async () => {
    const flags: StepFlags[] = [];
    const { recorder } = await runLoad(slowClient(flags), workload, { ...options, sequenceLength: 1000 });
    assert.equal(recorder.count + (recorder.errors.get(NOT_SENT) ?? 0), 20);
    assert.equal(flags.at(-1)?.end, true, "the last request ends the sequence");
    assert.equal(flags.filter((f) => f.end).length, 1);
  });
});

// A model that fails a step of every sequence: each sequence the lane gives up is ended
// (an END without a step number, unmeasured) before the next starts. Left open, they held
// the server's sequence slots until its idle timeout, and new sequences waited that long.
// The failed step is not sent again, whatever the protocol calls a model's failure (a 500
// over HTTP, INTERNAL over gRPC): it would fail the same way.
async function endsEachGivenUp(kind: string): Promise<void> {
  const calls: { sequence: number; flags: StepFlags }[] = [];
  const failing: BenchClient = {
    async step(sequence, _inputs, flags) {
      calls.push({ sequence: sequence.index, flags });
      await new Promise((resolve) => setTimeout(resolve, 1));
      if (flags.step === 2) throw new StepError(kind, "the model failed");
      return new Map();
    },
    async close() {},
  };
  const { recorder } = await runLoad(failing, workload, {
    ...options,
    rate: undefined,
    seconds: 0.1,
    sequenceLength: 5,
  });
  assert.ok((recorder.errors.get(kind) ?? 0) > 0, kind);
  assert.equal(recorder.firstMessages.get(kind), "the model failed");
  const sequences = [...new Set(calls.map((c) => c.sequence))];
  assert.ok(sequences.length > 1, "the lane went on with new sequences");
  for (const sequence of sequences) {
    const own = calls.filter((c) => c.sequence === sequence).map((c) => c.flags);
    assert.equal(own.at(-1)?.end, true, `sequence ${sequence} is ended`);
    // The last one may be cut short by the end of the window (then its own last step ends it).
    if (sequence === sequences.at(-1)) continue;
    assert.deepEqual(
      own.map((f) => [f.start, f.end, f.step]),
      [
        [true, false, 1],
        [false, false, 2],
        [false, true, undefined],
      ],
      `${kind}: sequence ${sequence}: started, failed at its second step, then ended`,
    );
  }
  // Each sequence is ended before the next one starts.
  const order = calls.map((c) => c.sequence);
  assert.deepEqual(
    order,
    [...order].sort((a, b) => a - b),
  );
}

describe("runLoad, failing steps of a sequence model", () => {
  it("ends every sequence it gives up before starting the next, and sends no failed step again", async () => {
    for (const kind of ["http 500", "grpc INTERNAL"]) {
      await endsEachGivenUp(kind);
    }
  });

  it("sends a step again only after a failure that means try again", () => {
    const again = (kind: string, message = "") => retryable(new StepError(kind, message));
    for (const kind of ["connection", "http 502", "http 503", "http 504", "grpc UNAVAILABLE"])
      assert.equal(again(kind), true, kind);
    for (const kind of ["http 500", "grpc INTERNAL", "grpc ALREADY_EXISTS", "http 400", "ws closed"])
      assert.equal(again(kind), false, kind);
    // A stream's error has no status: the server's message asks for the retry.
    assert.equal(again("stream error", "all sequence slots are in use; retry later"), true);
    assert.equal(again("stream error", "onnx runtime error: bad input"), false);
    // A model's failure is not sent again, whatever its message says.
    assert.equal(again("grpc INTERNAL", "the model says: retry"), false);
  });
});
