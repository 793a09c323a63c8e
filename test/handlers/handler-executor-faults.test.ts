import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, it } from "node:test";
import { HandlerExecutor, type ModelCalls } from "../../src/backends/handler/handler-executor.ts";
import { siblingModule } from "../../src/backends/worker/spawn-worker.ts";
import type { ExecutionOutcome, ExecutionRequest, ResponseSink } from "../../src/core/executor.ts";
import type { InferResponse } from "../../src/core/infer.ts";
import type { Tensor } from "../../src/core/tensor.ts";
import { silentLogger } from "../../src/observability/logger.ts";

// A handler instance (HandlerExecutor and its worker) driven directly, through the faults
// a handler's code can cause: its worker dying with a call to another model under way,
// requests that time out in a worker that then spins, responses sent without waiting for
// the client, a step that finishes just after its timeout, a close while the handler
// still initializes, an initialize() that never returns. Each case once left a request hanging, answered wrongly, or the
// worker dead.

const ENTRY = siblingModule(
  new URL("../../src/backends/handler/handler-executor.ts", import.meta.url).href,
  "handler-worker",
);
const folder = mkdtempSync(join(tmpdir(), "seqserve-handler-faults-"));
after(() => rmSync(folder, { recursive: true, force: true }));
let files = 0;

const NO_CALLS: ModelCalls = {
  infer: () => Promise.reject(new Error("no calls here")),
  closeSequence: () => false,
};

function executor(
  code: string,
  options: {
    calls?: ModelCalls;
    timeoutMs?: number;
    initializeTimeoutMs?: number;
    maxHeapMb?: number;
    maxUnackedResponses?: number;
  } = {},
): HandlerExecutor {
  const modelPath = join(folder, `model${files++}.mjs`);
  writeFileSync(modelPath, code);
  return new HandlerExecutor({
    name: "faulty_0",
    entry: ENTRY,
    logger: silentLogger(),
    calls: options.calls ?? NO_CALLS,
    timeoutMs: options.timeoutMs ?? 10_000,
    callTimeoutMs: 5_000,
    initializeTimeoutMs: options.initializeTimeoutMs ?? 10_000,
    maxHeapMb: options.maxHeapMb ?? 256,
    load: {
      type: "load",
      instanceName: "faulty_0",
      modelName: "faulty",
      version: "1",
      modelPath,
      parameters: {},
      limits: {
        maxConcurrentCalls: 8,
        maxUnackedResponses: options.maxUnackedResponses ?? 16,
        maxUnackedBytes: 1 << 22,
        maxStateBytes: 1 << 20,
      },
    },
  });
}

const int32 = (value: number): Tensor => ({ datatype: "INT32", shape: [1], data: Int32Array.of(value) });

function request(id: string, x: number, extra: Partial<ExecutionRequest> = {}): ExecutionRequest {
  const inputs = new Map([["X", int32(x)]]);
  return {
    request: { id, inputs, outputs: undefined, parameters: {}, sequence: undefined },
    inputs,
    outputNames: ["Y"],
    sequence: undefined,
    responses: undefined,
    ...extra,
  };
}

function run(handler: HandlerExecutor, r: ExecutionRequest): Promise<ExecutionOutcome> {
  return new Promise((resolve, reject) => {
    handler.execute([r], (_, outcome) => resolve(outcome)).catch(reject);
  });
}

const y = (outcome: ExecutionOutcome): number => {
  if (!outcome.ok) throw new Error(`failed: ${outcome.error.message}`);
  return (outcome.outputs.get("Y")!.data as Int32Array)[0]!;
};

/** A client of a decoupled request that reads nothing. */
class UnreadSink implements ResponseSink {
  pushed = 0;
  push(): void {
    this.pushed++;
  }
  onConsumed(): void {}
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe("a handler instance under faults", { timeout: 60_000 }, () => {
  it("a call answered after its worker was replaced does not reach a call of the new worker", async () => {
    const calls: ModelCalls = {
      async infer(_model, _version, call): Promise<InferResponse> {
        const x = (call.inputs.get("X")!.data as Int32Array)[0]!;
        await sleep(x === 111 ? 1500 : 2500);
        return {
          modelName: "other",
          modelVersion: "1",
          id: "",
          parameters: {},
          outputs: [{ name: "Y", ...int32(x) }],
        };
      },
      closeSequence: () => false,
    };
    const handler = executor(
      `export default {
        async execute([r], context) {
          if (r.inputs.X.data[0] === 0) process.exit(3);
          const answer = await context.infer("other", { inputs: { X: r.inputs.X } });
          return [{ outputs: { Y: answer.outputs.Y } }];
        },
      };`,
      { calls },
    );
    await handler.start();
    const slow = run(handler, request("A", 111));
    await sleep(100);
    const [a, crash] = await Promise.all([slow, run(handler, request("B", 0))]);
    assert.equal(a.ok, false);
    assert.equal(crash.ok, false);
    await handler.start();
    // The new worker's first call has the id A's call had; A's answer (111) comes first.
    assert.equal(y(await run(handler, request("C", 222))), 222);
    await handler.close();
  });

  it("a handler that runs out of memory ends its own worker, not the process; the instance is replaced", async () => {
    const handler = executor(
      `const kept = [];
      export default {
        execute([r]) {
          if (r.inputs.X.data[0] === 0) for (;;) kept.push(new Array(1e5).fill(1.5));
          return [{ outputs: { Y: r.inputs.X } }];
        },
      };`,
      { maxHeapMb: 32 },
    );
    const replaced: string[] = [];
    handler.onReplaced((why) => replaced.push(why));
    await handler.start();
    const outOfMemory = await run(handler, request("A", 0));
    assert.equal(outOfMemory.ok, false);
    assert.match(
      !outOfMemory.ok ? outOfMemory.error.message : "",
      /model instance 'faulty_0' stopped unexpectedly \(.*memory/,
    );
    assert.match(replaced[0] ?? "", /memory/);
    // Replaced: the next request is answered.
    await handler.start();
    assert.equal(y(await run(handler, request("B", 7))), 7);
    await handler.close();
  });

  it("a worker spinning in a request that timed out after another one is ended", async () => {
    const handler = executor(
      `export default {
        execute(requests) { for (const r of requests) void go(r); },
      };
      async function go(r) {
        if (r.inputs.X.data[0] === 1) return new Promise(() => {});
        await new Promise((resolve) => setTimeout(resolve, 700));
        for (;;) {}
      }`,
      { timeoutMs: 1000 },
    );
    const replaced: string[] = [];
    handler.onReplaced((why) => replaced.push(why));
    await handler.start();
    const first = run(handler, request("A", 1, { responses: new UnreadSink() }));
    await sleep(500);
    const spinning = await run(handler, request("B", 2, { responses: new UnreadSink() }));
    assert.equal(spinning.ok, false);
    assert.equal((await first).ok, false);
    assert.match(replaced[0] ?? "", /did not give back request 'B'/);
    await handler.close();
  });

  it("sends left un-awaited past the unread limit fail their request, and the worker lives on", async () => {
    const handler = executor(
      `export default {
        execute(requests) {
          for (const r of requests) {
            for (let i = 0; i < r.inputs.X.data[0]; i++) r.send({ outputs: { Y: { datatype: "INT32", shape: [1], data: Int32Array.of(i) } } });
            r.complete();
          }
        },
      };`,
      { maxUnackedResponses: 2 },
    );
    const replaced: string[] = [];
    handler.onReplaced((why) => replaced.push(why));
    await handler.start();
    const sink = new UnreadSink();
    const flood = await run(handler, request("A", 100_000, { responses: sink }));
    assert.equal(flood.ok, false);
    assert.match(flood.ok ? "" : flood.error.message, /still unread: await send\(\) before sending more/);
    assert.equal(sink.pushed, 2);
    // Within the limit, complete() with a send() still waiting for room is no failure.
    const within = await run(handler, request("B", 2, { responses: new UnreadSink() }));
    assert.equal(within.ok, true);
    await sleep(200);
    assert.deepEqual(replaced, []);
    await handler.close();
  });

  it("a step the handler finished just after its timeout is answered, not failed, since its state moved on", async () => {
    const handler = executor(
      `export default {
        execute(requests) {
          return requests.map((r) => {
            const n = (r.sequence.state.get("n") ?? 0) + 1;
            r.sequence.state.set("n", n);
            const until = Date.now() + r.inputs.X.data[0];
            while (Date.now() < until) {}
            return { outputs: { Y: { datatype: "INT32", shape: [1], data: Int32Array.of(n) } } };
          });
        },
      };`,
      { timeoutMs: 300 },
    );
    await handler.start();
    let state: ExecutionOutcome["state"];
    const answers: number[] = [];
    for (const [step, busyMs] of [
      [1, 0],
      [2, 450],
      [3, 0],
    ] as const) {
      const outcome = await run(
        handler,
        request(`S${step}`, busyMs, { sequence: { id: 7n, key: "7", start: step === 1, end: false, state } }),
      );
      state = outcome.state;
      answers.push(y(outcome));
    }
    assert.deepEqual(answers, [1, 2, 3]);
    await handler.close();
  });

  it("a close while the handler initializes fails the load and the requests waiting for it", async () => {
    const handler = executor(
      `export default {
        async initialize() { await new Promise((resolve) => setTimeout(resolve, 1500)); },
        execute(requests) { return requests.map(() => ({ outputs: {} })); },
      };`,
      { timeoutMs: 1000 },
    );
    const failure = (e: Error) => e.message;
    const started = handler.start().then(() => "loaded", failure);
    const waiting = run(handler, request("A", 1)).then(() => "answered", failure);
    await sleep(200);
    await handler.close();
    assert.match(await started, /is closing/);
    assert.match(await waiting, /is closing/);
  });

  it("an initialize() that never returns fails the load within handler_initialize_timeout_ms, its worker ended", async () => {
    for (const initialize of [
      "initialize() { for (;;) {} }",
      "async initialize() { await new Promise(() => {}); }",
    ]) {
      const handler = executor(
        `export default {
          ${initialize},
          execute(requests) { return requests.map(() => ({ outputs: {} })); },
        };`,
        { initializeTimeoutMs: 300 },
      );
      const failure = (e: Error) => e.message;
      const started = await handler.start().then(() => "loaded", failure);
      assert.equal(
        started,
        "model instance 'faulty_0' did not finish loading its handler (its module and initialize()) within 300 ms (its handler_initialize_timeout_ms)",
        initialize,
      );
      // Nothing waits on a handler that never loads: a request fails the same way.
      const waiting = await run(handler, request("A", 1)).then(() => "answered", failure);
      assert.match(waiting, /did not finish loading its handler/);
      await handler.close();
    }
  });
});
