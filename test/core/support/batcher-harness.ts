import { after, before } from "node:test";
import type { InferRequest, SequenceControl } from "../../../src/core/infer.ts";
import type { ModelConfig } from "../../../src/core/model-config.ts";
import { validateRequest } from "../../../src/core/request-validation.ts";
import { PendingRequest } from "../../../src/core/scheduler/pending-request.ts";
import { SequenceBatcher, type SequenceBatcherOptions } from "../../../src/core/sequence/sequence-batcher.ts";
import { MemoryStateStore } from "../../../src/core/sequence/state-store.ts";
import { ModelStatistics } from "../../../src/core/statistics.ts";
import type { Tensor } from "../../../src/core/tensor.ts";
import { AccumulatorExecutor, accumulatorConfig } from "./accumulator-executor.ts";

// A sequence batcher over the in-process accumulator: core tests send requests straight
// to the scheduler and watch the batches the executor receives.

export function batcherHarness(
  config: ModelConfig = accumulatorConfig(),
  executor: AccumulatorExecutor = new AccumulatorExecutor(),
  options: Partial<SequenceBatcherOptions> = {},
) {
  const store = new MemoryStateStore();
  /** What the batcher logged, at its level. */
  const logged: { level: "warn" | "info"; message: string }[] = [];
  const batcher = new SequenceBatcher({
    config,
    executors: [executor],
    statistics: new ModelStatistics(config.name, "1"),
    store,
    warn: (message) => logged.push({ level: "warn", message }),
    info: (message) => logged.push({ level: "info", message }),
    ...options,
  });
  const send = (
    value: number,
    sequence: Partial<SequenceControl>,
    moreInputs: Readonly<Record<string, Tensor>> = {},
  ): PendingRequest => {
    const request: InferRequest = {
      id: "",
      inputs: new Map([
        ["INPUT", { datatype: "INT32", shape: [1, 1], data: Int32Array.of(value) }],
        ...Object.entries(moreInputs),
      ]),
      outputs: undefined,
      parameters: {},
      sequence: { id: undefined, start: false, end: false, timeoutUs: undefined, ...sequence },
    };
    const pending = new PendingRequest(request, validateRequest(config, request));
    batcher.enqueue(pending);
    return pending;
  };
  const output = async (pending: PendingRequest): Promise<number> =>
    ((await pending.promise).outputs.get("OUTPUT")!.data as Int32Array)[0]!;
  return { batcher, executor, store, send, output, logged };
}

/** Lets the scheduler's setImmediate decisions and promise callbacks run. */
export const turn = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

/**
 * The batcher's timers are unref'd (a server's sockets keep its process alive): within the
 * calling describe, an interval keeps the test process alive for them instead.
 */
export function keepProcessAlive(): void {
  let alive: NodeJS.Timeout | undefined;
  before(() => {
    alive = setInterval(() => {}, 1000);
  });
  after(() => clearInterval(alive));
}
