import {
  type SequenceLoggingConfig,
  type SequenceStrategy,
  type StateBufferConfig,
  usableSequenceSlots,
} from "../../core/model-config.ts";
import type { MessageNode } from "./config-node.ts";
import type { ModelParameters } from "./model-parameters.ts";

// The ONNX stateful backend's model parameters (triton-inference-server/stateful_backend),
// read the way that backend reads them, with its defaults and its checks. seqserve honours
// them for any sequence model; a model with backend "stateful" gets the backend's defaults
// (all state memory reserved at load, 90 % of the slots usable, resets logged).

/** Parameters that tune how a GPU runs the model; the CPU build of ONNX Runtime has no use for them. */
const GPU_ONLY_PARAMETERS: Readonly<Record<string, string>> = {
  ort_ep: "the execution provider (TensorRT or CUDA) needs a GPU",
  compute_precision: "FP16 compute is a TensorRT execution provider setting",
  enable_trt_caching: "TensorRT engine caching needs the TensorRT execution provider",
  trt_cache_dir: "TensorRT engine caching needs the TensorRT execution provider",
  enable_cuda_graph: "CUDA graphs need a GPU",
  error_inject_rate: "error injection exists only in the backend's debug builds",
};

/** Parameters that only mean something with sequence batching. */
export const STATEFUL_BACKEND_SEQUENCE_PARAMETERS = [
  "max_candidate_sequence_use_ratio",
  "always_pad_to_max_batch",
  "initial_buffer_size",
  "subsequent_buffer_size",
  "buffer_alloc_threshold",
  "buffer_dealloc_threshold",
  "metric_logging_frequency_seconds",
  "logging_level",
  "batch_info_logging_level",
  "detailed_metrics_logging_level",
] as const;

/** The backend's default share of max_candidate_sequences a model may use at once. */
const STATEFUL_BACKEND_USE_RATIO = 0.9;

/** seqserve's own slab size when a config does not set one. */
const DEFAULT_SLAB_ROWS = 256;

const LAZY_KEYS = [
  "initial_buffer_size",
  "subsequent_buffer_size",
  "buffer_alloc_threshold",
  "buffer_dealloc_threshold",
] as const;

export interface StatefulBackendContext {
  readonly sequence: MessageNode;
  readonly params: ModelParameters;
  /** The model uses backend "stateful" (its defaults apply). */
  readonly statefulBackend: boolean;
  readonly maxBatchSize: number;
  readonly strategy: SequenceStrategy["kind"];
  /** Sequence slots over all instances. */
  readonly capacity: number;
}

export interface StatefulBackendSettings {
  readonly maxSequenceUseRatio: number | undefined;
  readonly padToMaxBatch: boolean;
  readonly stateBuffer: StateBufferConfig;
  readonly logging: SequenceLoggingConfig;
}

/** Sequence slots of a model: Triton's per-instance count times the instances. */
export function sequenceCapacity(
  strategy: SequenceStrategy,
  maxBatchSize: number,
  instances: number,
): number {
  const perInstance = strategy.kind === "oldest" ? strategy.maxCandidateSequences : Math.max(1, maxBatchSize);
  return perInstance * Math.max(1, instances);
}

/**
 * Lazy allocation: all four parameters or none (as the backend requires). Without them the
 * backend reserves every slot's state at load; seqserve's own default grows in slabs.
 *
 * The backend first lowers initial_buffer_size to the sequences it allows at once
 * (max_candidate_sequences × max_candidate_sequence_use_ratio), its default included, so a
 * larger value is not an error (its examples' 512 stays valid when max_candidate_sequences is
 * lowered), and its checks against the batch size and the allocation threshold see the
 * lowered value.
 */
function stateBuffer(ctx: StatefulBackendContext, ratio: number | undefined): StateBufferConfig {
  const { params, capacity, maxBatchSize } = ctx;
  // Direct has no max_candidate_sequences: the backend then counts its own default of 1280,
  // and seqserve has max_batch_size slots per instance, which the ratio would cut below one
  // batch; its initial buffer is lowered to those slots only.
  const oldest = ctx.strategy === "oldest";
  const usable = oldest ? usableSequenceSlots(ratio, capacity) : capacity;
  const given = LAZY_KEYS.filter((key) => params.has(key));
  if (given.length === 0) {
    if (ctx.statefulBackend) {
      const batch = Math.max(1, maxBatchSize);
      return {
        initialRows: usable,
        subsequentRows: batch,
        allocThreshold: batch,
        deallocThreshold: capacity,
      };
    }
    const rows = Math.min(capacity, DEFAULT_SLAB_ROWS);
    return {
      initialRows: rows,
      subsequentRows: rows,
      allocThreshold: 0,
      deallocThreshold: DEFAULT_SLAB_ROWS,
    };
  }
  if (given.length !== LAZY_KEYS.length) {
    const missing = LAZY_KEYS.filter((key) => !params.has(key));
    params.fail(
      given[0]!,
      `lazy state-buffer allocation needs all of ${LAZY_KEYS.join(", ")}; missing ${missing.join(", ")}`,
    );
  }
  const [givenInitialRows, subsequentRows, allocThreshold, deallocThreshold] = LAZY_KEYS.map((key) =>
    params.integer(key, 0, 0),
  ) as [number, number, number, number];
  const batch = Math.max(1, maxBatchSize);
  const modelName = ctx.sequence.ctx.modelName;
  const initialRows = Math.min(givenInitialRows, usable);
  const lowered =
    ratio === undefined || !oldest
      ? `lowered to the ${usable} sequence slots of model '${modelName}'`
      : `lowered to the ${usable} sequences max_candidate_sequence_use_ratio ${ratio} of the ${capacity} sequence slots of model '${modelName}' allows`;
  if (initialRows < givenInitialRows) {
    ctx.sequence.ctx.note(`initial_buffer_size ${givenInitialRows} is ${lowered}`);
  }
  // The checks below name the lowered size, so that a failure says where it came from.
  const initialSize =
    initialRows === givenInitialRows
      ? `initial_buffer_size ${initialRows}`
      : `initial_buffer_size ${givenInitialRows} (${lowered})`;
  if (initialRows < batch) {
    params.fail(
      "initial_buffer_size",
      `Initial buffer size must be larger than or equal to the max batch size: ${initialSize} is less than max_batch_size ${batch}`,
    );
  }
  if (subsequentRows < batch) {
    params.fail(
      "subsequent_buffer_size",
      "Subsequent buffer size must be larger than or equal to the max batch size.",
    );
  }
  if (allocThreshold < batch) {
    params.fail(
      "buffer_alloc_threshold",
      "Buffer allocation threshold size must be larger than or equal to the max batch size.",
    );
  }
  if (allocThreshold > initialRows) {
    params.fail(
      "buffer_alloc_threshold",
      `Initial buffer size cannot be smaller than allocation threshold: ${initialSize} is less than buffer_alloc_threshold ${allocThreshold}`,
    );
  }
  if (deallocThreshold <= allocThreshold) {
    ctx.sequence.ctx.note(
      `model '${modelName}': buffer_dealloc_threshold should be larger than buffer_alloc_threshold`,
    );
  }
  return { initialRows, subsequentRows, allocThreshold, deallocThreshold };
}

/**
 * The backend's two streams: INFO and VERBOSE. `logging_level` says which are shown (NONE,
 * INFO: the info stream, VERBOSE: both), and the *_logging_level parameters put a kind of
 * message in one stream or the other. Whatever is shown goes to the server's info log.
 */
type Stream = 0 | 1 | 2;
const NONE: Stream = 0;
const INFO: Stream = 1;
const VERBOSE: Stream = 2;

function stream(params: ModelParameters, key: string, fallback: Stream): Stream {
  const raw = params.get(key);
  if (raw === undefined) return fallback;
  switch (raw.trim().toUpperCase()) {
    case "NONE":
      return NONE;
    case "INFO":
      return INFO;
    case "VERBOSE":
      return VERBOSE;
    default:
      return params.fail(key, `parameter '${key}' must be NONE, INFO or VERBOSE, got '${raw}'`);
  }
}

function logging(ctx: StatefulBackendContext): SequenceLoggingConfig {
  const { params } = ctx;
  // The backend logs resets at INFO unless told otherwise; other models stay quiet unless asked.
  const shown = stream(params, "logging_level", ctx.statefulBackend ? INFO : NONE);
  const visible = (kind: Stream): boolean => kind !== NONE && kind <= shown;
  return {
    resets: visible(INFO),
    batches: visible(stream(params, "batch_info_logging_level", shown === VERBOSE ? INFO : VERBOSE)),
    metricsIntervalSecs: visible(INFO) ? params.integer("metric_logging_frequency_seconds", 0, 0) : 0,
    detailedMetrics: visible(stream(params, "detailed_metrics_logging_level", VERBOSE)),
  };
}

export function resolveStatefulBackendParameters(ctx: StatefulBackendContext): StatefulBackendSettings {
  const { params } = ctx;
  const modelName = ctx.sequence.ctx.modelName;
  for (const [key, why] of Object.entries(GPU_ONLY_PARAMETERS)) {
    if (params.has(key))
      ctx.sequence.ctx.note(`parameter '${key}' of model '${modelName}' has no effect here: ${why}`);
  }
  const ratio =
    params.ratio("max_candidate_sequence_use_ratio") ??
    (ctx.statefulBackend ? STATEFUL_BACKEND_USE_RATIO : undefined);
  return {
    maxSequenceUseRatio: ratio,
    padToMaxBatch: params.bool("always_pad_to_max_batch", false),
    stateBuffer: stateBuffer(ctx, ratio),
    logging: logging(ctx),
  };
}
