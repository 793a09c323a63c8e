import assert from "node:assert/strict";
import { Writable } from "node:stream";
import { after, before, describe, it } from "node:test";
import ort from "onnxruntime-node";
import { pino } from "pino";
import { TestClient } from "../grpc/support/grpc-harness.ts";
import { errorOf, rawOutput, StreamCall } from "../support/grpc-stream-call.ts";
import { batchCounts, listSequences, sleep } from "../support/sequence-kit.ts";
import {
  onnxFileName,
  oracle,
  randomSegments,
  type Segment,
  STATEFUL_MODELS,
  type StatefulModelSpec,
  segmentRequest,
  statefulConfig,
  statefulModelBytes,
} from "../support/stateful-backend-kit.ts";
import { startTestServer, type TestServer } from "../support/test-server.ts";

// The ONNX stateful backend's parameters that change what a user sees, each on its own
// small model: max_candidate_sequence_use_ratio (prompt refusals near capacity),
// always_pad_to_max_batch, lazy state-buffer allocation (state memory grown and released in
// slabs), store_states_as_fp16, and the runner's log (resets, batch metrics).

const base = STATEFUL_MODELS[0]!; // accumulate_fp32: one FP32 pair of width 5
const ROW_BYTES = base.width * 4;

function variant(name: string, overrides: Partial<StatefulModelSpec>): StatefulModelSpec {
  return { ...base, name, instances: 1, ...overrides };
}

// Two sequences at once: its initial buffer is lowered to two, so a batch is at most two.
const RATIO = variant("ratio", {
  maxCandidateSequences: 4,
  parameters: {
    max_candidate_sequence_use_ratio: "0.5",
    initial_buffer_size: "4",
    subsequent_buffer_size: "2",
    buffer_alloc_threshold: "2",
    buffer_dealloc_threshold: "4",
  },
  maxBatchSize: 2,
});
const PADDED = variant("padded", {
  maxBatchSize: 4,
  inferEndRequests: true,
  parameters: { always_pad_to_max_batch: "1" },
});
const LAZY = variant("lazy", {
  maxBatchSize: 4,
  maxCandidateSequences: 64,
  parameters: {
    initial_buffer_size: "8",
    subsequent_buffer_size: "8",
    buffer_alloc_threshold: "4",
    buffer_dealloc_threshold: "8",
    max_candidate_sequence_use_ratio: "1",
  },
});
const HALF = variant("half", { parameters: { store_states_as_fp16: "1" } });
const NOISY = variant("noisy", {
  inferEndRequests: true,
  parameters: {
    metric_logging_frequency_seconds: "1",
    logging_level: "VERBOSE",
    detailed_metrics_logging_level: "INFO",
  },
});
// Direct pads empty slots with zero rows: along the marked dimension too.
const DIRECT = variant("direct", {
  direct: true,
  maxBatchSize: 4,
  inferEndRequests: true,
  parameters: {
    initial_buffer_size: "4",
    subsequent_buffer_size: "4",
    buffer_alloc_threshold: "4",
    buffer_dealloc_threshold: "4",
  },
});
const SPECS = [RATIO, PADDED, LAZY, HALF, NOISY, DIRECT];

const logLines: Record<string, unknown>[] = [];
let server: TestServer;
let client: TestClient;

before(async () => {
  const sink = new Writable({
    write(chunk: Buffer, _encoding, done) {
      for (const line of chunk.toString("utf8").split("\n")) if (line !== "") logLines.push(JSON.parse(line));
      done();
    },
  });
  server = await startTestServer(
    Object.fromEntries(
      SPECS.map((spec) => [
        spec.name,
        { config: statefulConfig(spec), onnx: statefulModelBytes(spec), fileName: onnxFileName(spec) },
      ]),
    ),
    {},
    pino({ level: "info" }, sink),
  );
  client = new TestClient(server.grpcPort);
});
after(async () => {
  client?.close();
  await server?.stop();
});

const [SEGMENTS] = randomSegments(base, 1, 3, 5);
const segment = SEGMENTS![0]!;

/** Starts sequence `index` of `spec` (a START that does not end it); resolves with the in-band error, "" if none. */
async function start(call: StreamCall, spec: StatefulModelSpec, index: number): Promise<string> {
  return errorOf(await call.send(segmentRequest(spec, index, 0, segment, { start: true, end: false })));
}

async function end(call: StreamCall, spec: StatefulModelSpec, index: number): Promise<void> {
  assert.equal(
    errorOf(await call.send(segmentRequest(spec, index, 1, segment, { start: false, end: true }))),
    "",
  );
}

const summaryOf = async (model: string) => (await listSequences(server.url, model)).summary;

describe("the stateful backend's parameters", { timeout: 60_000 }, () => {
  it("max_candidate_sequence_use_ratio: past that share of the slots a start is refused at once", async () => {
    const call = new StreamCall(client);
    assert.equal(await start(call, RATIO, 0), "");
    assert.equal(await start(call, RATIO, 1), "");
    assert.equal(
      await start(call, RATIO, 2),
      "model 'ratio' has 2 live sequences, as many as max_candidate_sequence_use_ratio 0.5 of its 4 sequence slots allows; retry later",
    );
    // The refused start changed nothing; once one sequence ends another may start.
    await end(call, RATIO, 0);
    assert.equal(await start(call, RATIO, 2), "");
    await end(call, RATIO, 1);
    await end(call, RATIO, 2);
    await call.end();
  });

  it("always_pad_to_max_batch: every batch runs max_batch_size rows, and the answers are unchanged", async () => {
    const call = new StreamCall(client);
    const answers = await Promise.all(
      SEGMENTS!.map((s, i) =>
        call.send(segmentRequest(PADDED, 0, i, s, { start: i === 0, end: i === SEGMENTS!.length - 1 })),
      ),
    );
    await call.end();
    const session = await ort.InferenceSession.create(statefulModelBytes(PADDED));
    const exact = await oracle(session, PADDED, SEGMENTS!);
    await session.release();
    answers.forEach((answer, i) => {
      assert.deepEqual(new Uint8Array(rawOutput(answer, "Output")), exact[i]!.get("Output"));
    });
    assert.deepEqual(await batchCounts(server.url, "padded"), { 4: SEGMENTS!.length });
  });

  it("the Direct strategy: an empty slot is padded along the marked dimension, answers as ONNX Runtime alone", async () => {
    const [first, second] = randomSegments(DIRECT, 2, 3, 11);
    const call = new StreamCall(client);
    const step = (sequence: number, i: number, data: Segment) =>
      call.send(
        segmentRequest(DIRECT, sequence, i, data, { start: i === 0, end: sequence === 0 && i === 1 }),
      );
    // Sequence 0 takes slot 0 and sequence 1 slot 1; once 0 has ended, 1 runs in batches of
    // two rows (Direct's batch reaches the highest busy slot) whose row 0 is padding.
    const answers = [
      await step(0, 0, first![0]!),
      await step(1, 0, second![0]!),
      await step(0, 1, first![1]!),
      await step(1, 1, second![1]!),
      await step(1, 2, second![2]!),
    ];
    await call.end();
    const session = await ort.InferenceSession.create(statefulModelBytes(DIRECT));
    const zero = await oracle(session, DIRECT, first!.slice(0, 2));
    const one = await oracle(session, DIRECT, second!);
    await session.release();
    const exact = [zero[0], one[0], zero[1], one[1], one[2]];
    answers.forEach((answer, i) => {
      assert.deepEqual(new Uint8Array(rawOutput(answer, "Output")), exact[i]!.get("Output"), `answer ${i}`);
    });
    // At least the last two ran as two rows with row 0 padding.
    assert.ok(((await batchCounts(server.url, "direct"))[2] ?? 0) >= 2);
  });

  it("lazy allocation: state memory grows a slab below the threshold and the last slab goes when empty", async () => {
    const allocated = async () => (await summaryOf("lazy")).state_allocated_bytes;
    const call = new StreamCall(client);
    // initial_buffer_size 8 is reserved at load.
    assert.equal(await allocated(), 8 * ROW_BYTES);
    for (let i = 0; i < 3; i++) assert.equal(await start(call, LAZY, i), "");
    assert.equal(await allocated(), 8 * ROW_BYTES);
    // Fewer than buffer_alloc_threshold (4) rows free: a slab of subsequent_buffer_size (8) more.
    for (let i = 3; i < 5; i++) assert.equal(await start(call, LAZY, i), "");
    assert.equal(await allocated(), 16 * ROW_BYTES);
    for (let i = 5; i < 13; i++) assert.equal(await start(call, LAZY, i), "");
    assert.equal(await allocated(), 24 * ROW_BYTES);
    assert.equal((await summaryOf("lazy")).state_bytes, 13 * ROW_BYTES);
    // Sequences 8-12 hold the second slab: when they end, the third (last, empty) slab goes,
    // as more than buffer_dealloc_threshold (8) rows are free; the second stays (8 free is not more).
    for (let i = 8; i < 13; i++) await end(call, LAZY, i);
    assert.equal(await allocated(), 16 * ROW_BYTES);
    await end(call, LAZY, 7);
    assert.equal(await allocated(), 8 * ROW_BYTES);
    // The initial slab is kept until the model is unloaded.
    for (let i = 0; i < 7; i++) await end(call, LAZY, i);
    assert.equal(await allocated(), 8 * ROW_BYTES);
    assert.equal((await summaryOf("lazy")).state_bytes, 0);
    await call.end();
  });

  it("store_states_as_fp16: an FP32 state is kept in half the bytes", async () => {
    const call = new StreamCall(client);
    assert.equal(await start(call, HALF, 0), "");
    const [sequence] = (await listSequences(server.url, "half")).sequences;
    assert.equal(sequence?.stateBytes, base.width * 2);
    await end(call, HALF, 0);
    await call.end();
  });

  it("the runner's log: resets, each batch (VERBOSE), and average and max batch size every period", async () => {
    const call = new StreamCall(client);
    assert.equal(await start(call, NOISY, 0), "");
    // A batch after metric_logging_frequency_seconds has passed reports the period.
    await sleep(1100);
    await end(call, NOISY, 0);
    await call.end();
    const lines = logLines.filter((l) => l.model === "noisy");
    assert.ok(lines.some((l) => l.event === "sequence_reset"));
    assert.ok(
      lines.some(
        (l) => l.event === "batch" && l.msg === "running inference of 1 requests on instance noisy_0",
      ),
    );
    const metrics = lines.filter((l) => l.event === "batch_metrics").at(-1);
    assert.ok(metrics !== undefined, JSON.stringify(lines));
    assert.equal(metrics.inference_calls, 2);
    assert.equal(metrics.average_batch_size, 1);
    assert.equal(metrics.max_batch_size, 1);
    assert.equal(typeof metrics.compute_ms, "number");
  });
});
