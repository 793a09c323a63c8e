import type { DataType, NumericDataType } from "./datatype.ts";

// The model configuration as the core uses it: validated, with every default applied,
// frozen. It is produced by src/config from a Triton config.pbtxt / config.json (or an
// OpenVINO Model Server config.json) and completed from the model file's own metadata.
// Field meanings follow Triton's model_config.proto; names are camelCase here, and the
// wire/JSON form (snake_case, TYPE_FP32 spellings) is produced by src/config again.

export type VersionPolicy =
  | { readonly kind: "latest"; readonly numVersions: number }
  | { readonly kind: "all" }
  | { readonly kind: "specific"; readonly versions: readonly number[] };

export interface InputConfig {
  readonly name: string;
  readonly datatype: DataType;
  /** Dims without the implicit batch dimension (when maxBatchSize > 0); -1 = variable. */
  readonly dims: readonly number[];
  /** The shape the model sees, when it differs from `dims` (Triton's `reshape`); [] = a scalar. */
  readonly reshape?: readonly number[];
  readonly optional: boolean;
  readonly allowRaggedBatch: boolean;
  /**
   * Not batched: one value shared by every request of a batch (Silero VAD's scalar `sr`).
   * Requests that disagree on its value go to different batches. seqserve extension,
   * declared with the model parameter `shared_inputs`, or inferred for an input that the
   * model file declares with no room for a batch dimension.
   */
  readonly shared: boolean;
  /**
   * The ONNX stateful backend's convention: the dimension of `dims` marked -1 is the batch
   * (axis `markedBatchAxis` of the model's tensor, which has the rank of `dims`); requests
   * still carry Triton's leading batch dimension of 1. Undefined: Triton's convention, the
   * batch is a dimension prepended to `dims`.
   */
  readonly markedBatchAxis?: number;
}

export interface OutputConfig {
  readonly name: string;
  readonly datatype: DataType;
  readonly dims: readonly number[];
  readonly reshape?: readonly number[];
  readonly labelFilename?: string;
  /** As InputConfig.markedBatchAxis. */
  readonly markedBatchAxis?: number;
}

export type InstanceKind = "KIND_AUTO" | "KIND_CPU" | "KIND_GPU" | "KIND_MODEL";

export interface InstanceGroupConfig {
  readonly name: string;
  readonly count: number;
  readonly kind: InstanceKind;
}

export interface DynamicBatchingConfig {
  readonly preferredBatchSizes: readonly number[];
  readonly maxQueueDelayUs: number;
  readonly preserveOrdering: boolean;
  /** Triton's priority_levels: 0 = none (one queue); else levels 1 (served first) to this. */
  readonly priorityLevels: number;
  /** The level of a request without a priority (or with one out of range); 0 without levels. */
  readonly defaultPriorityLevel: number;
  /** The policy of every level that has none of its own (default_queue_policy). */
  readonly defaultQueuePolicy: QueuePolicyConfig;
  /** priority_queue_policy: the levels with a policy of their own. */
  readonly priorityQueuePolicies: ReadonlyMap<number, QueuePolicyConfig>;
}

/** Triton's ModelQueuePolicy, as one queue applies it. */
export interface QueuePolicyConfig {
  /** 0 = unbounded (max_queue_size). */
  readonly maxQueueSize: number;
  /** How long a request may wait in the queue; absent: without limit. */
  readonly timeout?: QueueTimeoutConfig;
}

/** Triton's queue policy timeouts (ModelQueuePolicy). */
export interface QueueTimeoutConfig {
  /** default_timeout_microseconds: positive (0 is "no timeout", which leaves this absent). */
  readonly defaultUs: number;
  /** allow_timeout_override: a request's `timeout` may shorten it, never lengthen it. */
  readonly allowOverride: boolean;
  /**
   * timeout_action: a request that waited too long is refused (REJECT, UNAVAILABLE
   * "Request timeout expired") or served after every request that has not (DELAY).
   */
  readonly action: "REJECT" | "DELAY";
}

export type ControlKind = "START" | "END" | "READY" | "CORRID";

/** One control tensor the sequence batcher feeds the model (Triton `control_input`). */
export interface ControlInputConfig {
  /**
   * The model input it feeds: the config's name, or for the ONNX stateful backend's START the
   * model's spelling of it (that backend matches the reset input ignoring case).
   */
  readonly name: string;
  readonly kind: ControlKind;
  /** For CORRID: UINT64, INT64, UINT32, INT32 or BYTES. For flags: the false/true datatype. */
  readonly datatype: DataType;
  /** For START/END/READY: the [false, true] values (from *_false_true). */
  readonly falseTrue?: readonly [number, number];
  /**
   * false when the model has no input of this name: the server acts on the control itself
   * (the ONNX stateful backend's END and CORRID controls) and feeds nothing.
   */
  readonly fed: boolean;
}

/** Fresh state on START. `dims` has the rank of StateConfig.dims, with 1 on the batch axis. */
export type InitialState =
  | { readonly kind: "zero"; readonly datatype: NumericDataType; readonly dims: readonly number[] }
  | {
      readonly kind: "file";
      readonly datatype: NumericDataType;
      readonly dims: readonly number[];
      /** Absolute path of `<model>/initial_state/<data_file>`. */
      readonly path: string;
    };

/**
 * One implicit state tensor: the model's output `outputName` of step i is fed back as
 * input `inputName` at step i+1 of the same sequence. The state kept per sequence has
 * size 1 on `batchAxis`; a batch concatenates sequences along that axis.
 */
export interface StateConfig {
  readonly inputName: string;
  readonly outputName: string;
  readonly datatype: NumericDataType;
  /** Full dims as the model sees them with the batch axis at `batchAxis` (-1 = variable). */
  readonly dims: readonly number[];
  /** Axis of the batch in the model's state tensor; undefined when the model does not batch. */
  readonly batchAxis: number | undefined;
  /** Fresh state on START; undefined = zeros, variable dims starting at 1. */
  readonly initialState?: InitialState;
}

export type SequenceStrategy =
  | {
      readonly kind: "direct";
      readonly maxQueueDelayUs: number;
      readonly minimumSlotUtilization: number;
    }
  | {
      readonly kind: "oldest";
      readonly maxCandidateSequences: number;
      readonly preferredBatchSizes: readonly number[];
      readonly maxQueueDelayUs: number;
      readonly preserveOrdering: boolean;
    };

export interface SequenceBatchingConfig {
  readonly strategy: SequenceStrategy;
  /** Idle time after which a sequence is ended; undefined = never (seqserve extension). */
  readonly maxSequenceIdleUs: number | undefined;
  /**
   * Where the idle time counts from: each request's arrival (Triton's, the default), or
   * the end of each step, a sequence with a request running or waiting never being idle
   * (OVMS's sequence cleaner; seqserve's `sequence_idle_from: last_step`).
   */
  readonly idleFrom?: "arrival" | "last_step";
  readonly controlInputs: readonly ControlInputConfig[];
  readonly states: readonly StateConfig[];
  /** Sequences allowed to wait for a slot; a start beyond it is refused with UNAVAILABLE. */
  readonly backlogLimit: number;
  /**
   * The most bytes one sequence's state may hold (`sequence_state_max_bytes`): a step that
   * would leave it larger fails with RESOURCE_EXHAUSTED, its state as it was. A state that
   * grows each step (a decoder's cache) is then bounded. undefined: no limit.
   */
  readonly stateMaxBytes?: number;
  /** Keep FP32 state as FP16 between steps (ONNX stateful backend's store_states_as_fp16). */
  readonly storeStatesAsFp16: boolean;
  /** false: an END request frees state without running the model (infer_end_requests: 0). */
  readonly inferEndRequests: boolean;
  /**
   * Share of the sequence slots that may be live at once; a start beyond it is refused at
   * once instead of waiting (ONNX stateful backend's max_candidate_sequence_use_ratio).
   */
  readonly maxSequenceUseRatio: number | undefined;
  /** Pad every batch to max_batch_size rows (ONNX stateful backend's always_pad_to_max_batch). */
  readonly padToMaxBatch: boolean;
  /** How state memory is allocated: in slabs of rows, grown and shrunk as sequences come and go. */
  readonly stateBuffer: StateBufferConfig;
  /** What the model runner logs (the ONNX stateful backend's logging parameters). */
  readonly logging: SequenceLoggingConfig;
}

/**
 * State rows are kept in slabs (one row per live sequence). `initialRows` are allocated at
 * load; when fewer than `allocThreshold` rows are free a slab of `subsequentRows` is added;
 * the last slab is released when it is empty and more than `deallocThreshold` rows are free.
 * (The ONNX stateful backend's lazy buffer allocation: initial_buffer_size,
 * subsequent_buffer_size, buffer_alloc_threshold, buffer_dealloc_threshold.)
 */
export interface StateBufferConfig {
  readonly initialRows: number;
  readonly subsequentRows: number;
  readonly allocThreshold: number;
  readonly deallocThreshold: number;
}

/** Which model runner messages are logged (at info level, as the ONNX stateful backend does). */
export interface SequenceLoggingConfig {
  /** A line per batch naming the sequences whose state was reset (START). */
  readonly resets: boolean;
  /** A line per batch: its size and instance. */
  readonly batches: boolean;
  /** Every this many seconds, average and maximum batch size (0: never). */
  readonly metricsIntervalSecs: number;
  /** With the periodic line, the queue and compute time split. */
  readonly detailedMetrics: boolean;
}

/** Where a warm-up input's values come from (Triton's ModelWarmup.Input data types). */
export type WarmupData =
  | { readonly kind: "zero" }
  | { readonly kind: "random" }
  /** A file in the model's `warmup` folder: raw values, or Triton's length-prefixed strings. */
  | { readonly kind: "file"; readonly path: string };

export interface WarmupInput {
  readonly name: string;
  readonly datatype: DataType;
  /** Without the batch dimension; every dimension fixed. */
  readonly dims: readonly number[];
  readonly data: WarmupData;
}

/** One `model_warmup` sample: `batchSize` requests run as one batch, `count` times, on each instance. */
export interface WarmupSample {
  readonly name: string;
  readonly batchSize: number;
  readonly count: number;
  readonly inputs: readonly WarmupInput[];
}

export interface ModelConfig {
  readonly name: string;
  readonly platform: string;
  readonly backend: string;
  readonly versionPolicy: VersionPolicy;
  /** 0 = the model does not batch; its dims are full shapes. */
  readonly maxBatchSize: number;
  readonly inputs: readonly InputConfig[];
  readonly outputs: readonly OutputConfig[];
  readonly instanceGroups: readonly InstanceGroupConfig[];
  readonly defaultModelFilename: string;
  readonly dynamicBatching?: DynamicBatchingConfig;
  readonly sequenceBatching?: SequenceBatchingConfig;
  /** Triton `parameters { key value { string_value } }`. */
  readonly parameters: Readonly<Record<string, string>>;
  /**
   * Triton's `model_transaction_policy { decoupled }`: the model may send any number of
   * responses per request (model code only). Absent = false.
   */
  readonly decoupled?: boolean;
  /** `model_warmup`, its samples of batch size 0 left out (Triton skips them). */
  readonly warmup: readonly WarmupSample[];
}

/**
 * The sequence slots a model may use at once: all of them, or its
 * max_candidate_sequence_use_ratio share (at least one).
 */
export function usableSequenceSlots(maxSequenceUseRatio: number | undefined, slots: number): number {
  return maxSequenceUseRatio === undefined ? slots : Math.max(1, Math.floor(maxSequenceUseRatio * slots));
}

export function instanceCount(config: ModelConfig): number {
  let count = 0;
  for (const group of config.instanceGroups) count += group.count;
  return Math.max(1, count);
}
