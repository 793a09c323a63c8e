import { invalidArg } from "../../core/errors.ts";

// ONNX Runtime session options from a model's config, read the way Triton's onnxruntime
// backend reads them: `optimization { graph { level } }` and the string `parameters`
// intra_op_thread_count, inter_op_thread_count, execution_mode, enable_mem_arena,
// enable_mem_pattern and session.use_device_allocator_for_initializers. Other parameter
// keys belong to other parts of the server (state_pairs, ...) and are left alone.

type GraphOptimizationLevel = "disabled" | "basic" | "extended" | "all";

/** A plain, structured-cloneable subset of onnxruntime-node's SessionOptions. */
export interface OnnxSessionOptions {
  readonly graphOptimizationLevel: GraphOptimizationLevel;
  /** Undefined: ONNX Runtime's own default (one thread per core). */
  readonly intraOpNumThreads?: number;
  readonly interOpNumThreads?: number;
  readonly executionMode: "sequential" | "parallel";
  readonly enableCpuMemArena?: boolean;
  readonly enableMemPattern?: boolean;
  /** Session config entries ("session.*" keys of ONNX Runtime's session options). */
  readonly extra?: Readonly<Record<string, string>>;
  /** 4 = fatal only: run errors come back to the caller, they need not be printed too. */
  readonly logSeverityLevel: 0 | 1 | 2 | 3 | 4;
}

// Triton's `optimization.graph.level`: -1 basic, 1 extended, 2 disabled; anything else
// (0, or no level) leaves every optimization on.
const GRAPH_LEVELS: ReadonlyMap<number, GraphOptimizationLevel> = new Map([
  [-1, "basic"],
  [0, "all"],
  [1, "extended"],
  [2, "disabled"],
]);

// Each instance runs in its own worker thread and the server usually runs several
// instances on few cores: ONNX Runtime's default of one intra-op thread per core would
// make N instances oversubscribe the CPU N times (and its spinning threads burn cores
// while idle). One thread per instance scales with `instance_group { count }` instead;
// a model that wants more says so with intra_op_thread_count ("0" = ONNX Runtime's default).
const DEFAULT_INTRA_OP_THREADS = 1;

function parseCount(parameters: Readonly<Record<string, string>>, key: string): number | undefined {
  const value = parameters[key];
  if (value === undefined) return undefined;
  const text = value.trim();
  if (!/^\d+$/.test(text)) {
    throw invalidArg(`model parameter '${key}' must be a non-negative integer, got '${value}'`);
  }
  return Number(text);
}

// Triton's ParseBoolValue: true/on/1 and false/off/0, in any case.
function parseBool(parameters: Readonly<Record<string, string>>, key: string): boolean | undefined {
  const value = parameters[key];
  if (value === undefined) return undefined;
  const text = value.trim().toLowerCase();
  if (text === "true" || text === "on" || text === "1") return true;
  if (text === "false" || text === "off" || text === "0") return false;
  throw invalidArg(`model parameter '${key}' must be a boolean (true/false, on/off, 1/0), got '${value}'`);
}

/**
 * Session options for a model from its config `parameters` and `optimization.graph.level`.
 * Throws INVALID_ARG naming the parameter when a value cannot be read.
 */
export function onnxSessionOptions(
  parameters: Readonly<Record<string, string>>,
  graphLevel: number | undefined,
): OnnxSessionOptions {
  // Any other level is ORT_ENABLE_ALL, as Triton's backend reads it.
  const graphOptimizationLevel = GRAPH_LEVELS.get(graphLevel ?? 0) ?? "all";

  let executionMode: OnnxSessionOptions["executionMode"] = "sequential";
  const mode = parseCount(parameters, "execution_mode");
  if (mode === 1) executionMode = "parallel";
  else if (mode !== undefined && mode !== 0) {
    throw invalidArg(
      `model parameter 'execution_mode' must be 0 (sequential) or 1 (parallel), got '${mode}'`,
    );
  }

  const intra = parseCount(parameters, "intra_op_thread_count") ?? DEFAULT_INTRA_OP_THREADS;
  const inter = parseCount(parameters, "inter_op_thread_count") ?? 0;
  const arena = parseBool(parameters, "enable_mem_arena");
  const pattern = parseBool(parameters, "enable_mem_pattern");

  const extra: Record<string, string> = {};
  const initializers = "session.use_device_allocator_for_initializers";
  const useDeviceAllocator = parseBool(parameters, initializers);
  if (useDeviceAllocator !== undefined) extra[initializers] = useDeviceAllocator ? "1" : "0";

  return {
    graphOptimizationLevel,
    executionMode,
    logSeverityLevel: 4,
    // 0 means "ONNX Runtime decides", which is what leaving the option out does.
    ...(intra > 0 ? { intraOpNumThreads: intra } : {}),
    ...(inter > 0 ? { interOpNumThreads: inter } : {}),
    ...(arena === undefined ? {} : { enableCpuMemArena: arena }),
    ...(pattern === undefined ? {} : { enableMemPattern: pattern }),
    ...(Object.keys(extra).length > 0 ? { extra } : {}),
  };
}
