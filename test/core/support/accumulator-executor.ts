import { internal } from "../../../src/core/errors.ts";
import type { ExecutionResult, ModelExecutor } from "../../../src/core/executor.ts";
import type { ModelConfig } from "../../../src/core/model-config.ts";
import type { Tensor } from "../../../src/core/tensor.ts";
import { int32ModelConfig } from "./int32-model-config.ts";

/**
 * An in-process executor for core tests: an accumulator with implicit state.
 * OUTPUT = STATE + INPUT (per row), STATE_OUT = OUTPUT. Records every batch it runs, and
 * can be held so tests decide when a batch completes.
 */
export class AccumulatorExecutor implements ModelExecutor {
  readonly name: string;
  readonly batches: { rows: number; inputs: Map<string, Tensor> }[] = [];
  #gate: Promise<void> | undefined;
  #open: (() => void) | undefined;
  #failures = 0;

  constructor(name = "acc_0") {
    this.name = name;
  }

  /** Later runs wait until `release()`. */
  hold(): void {
    this.#gate = new Promise((resolve) => {
      this.#open = resolve;
    });
  }

  /** The next `count` runs throw, as a model that fails at run time. */
  failNext(count = 1): void {
    this.#failures = count;
  }

  release(): void {
    this.#open?.();
    this.#gate = undefined;
  }

  async run(inputs: ReadonlyMap<string, Tensor>): Promise<ExecutionResult> {
    const input = inputs.get("INPUT")!;
    const state = inputs.get("STATE")!;
    const rows = input.shape[0]!;
    this.batches.push({ rows, inputs: new Map(inputs) });
    if (this.#gate !== undefined) await this.#gate;
    if (this.#failures > 0) {
      this.#failures--;
      // As a real executor fails: with a ServerError (anything else is a bug, reported generically).
      throw internal("the accumulator failed on purpose");
    }
    const out = new Int32Array(rows);
    const a = input.data as Int32Array;
    const s = state.data as Int32Array;
    for (let i = 0; i < rows; i++) out[i] = a[i]! + s[i]!;
    const outputs = new Map<string, Tensor>([
      ["OUTPUT", { datatype: "INT32", shape: [rows, 1], data: out }],
      ["STATE_OUT", { datatype: "INT32", shape: [rows, 1], data: out.slice() }],
    ]);
    return { outputs, timings: { inputNs: 0, inferNs: 0, outputNs: 0 } };
  }

  async close(): Promise<void> {}
}

export function accumulatorConfig(
  overrides: Partial<ModelConfig["sequenceBatching"] & object> = {},
  maxBatchSize = 4,
): ModelConfig {
  return {
    ...int32ModelConfig("acc", maxBatchSize),
    sequenceBatching: {
      strategy: {
        kind: "oldest",
        maxCandidateSequences: 4,
        preferredBatchSizes: [],
        maxQueueDelayUs: 0,
        preserveOrdering: false,
      },
      maxSequenceIdleUs: 1_000_000,
      controlInputs: [
        { name: "START", kind: "START", datatype: "INT32", falseTrue: [0, 1], fed: true },
        { name: "READY", kind: "READY", datatype: "INT32", falseTrue: [0, 1], fed: true },
      ],
      states: [
        { inputName: "STATE", outputName: "STATE_OUT", datatype: "INT32", dims: [-1, 1], batchAxis: 0 },
      ],
      backlogLimit: 16,
      storeStatesAsFp16: false,
      inferEndRequests: true,
      maxSequenceUseRatio: undefined,
      padToMaxBatch: false,
      stateBuffer: { initialRows: 4, subsequentRows: 4, allocThreshold: 0, deallocThreshold: 4 },
      logging: { resets: false, batches: false, metricsIntervalSecs: 0, detailedMetrics: false },
      ...overrides,
    },
  };
}

/**
 * The accumulator under Triton's Oldest strategy: `candidates` sequence slots per instance,
 * batches of up to `maxBatchSize` rows leaving at once (no queue delay). `neverIdle`: no
 * idle timeout, a sequence stays until it ends. `overrides` set any other field.
 */
export function oldestAccumulatorConfig(options: {
  candidates: number;
  maxBatchSize: number;
  preserveOrdering?: boolean;
  neverIdle?: boolean;
  overrides?: Partial<ModelConfig["sequenceBatching"] & object>;
}): ModelConfig {
  return accumulatorConfig(
    {
      strategy: {
        kind: "oldest",
        maxCandidateSequences: options.candidates,
        preferredBatchSizes: [],
        maxQueueDelayUs: 0,
        preserveOrdering: options.preserveOrdering ?? false,
      },
      ...(options.neverIdle === true ? { maxSequenceIdleUs: undefined } : {}),
      ...options.overrides,
    },
    options.maxBatchSize,
  );
}
