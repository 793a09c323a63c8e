import type { ModelExecutor } from "./executor.ts";
import type { ModelIo } from "./model-io.ts";
import type { Tensor } from "./tensor.ts";

// What the repository asks of a backend: open a model file as a number of instances.
// The app picks the implementation (ONNX Runtime in worker threads); the repository and
// the core only see this interface.

interface OpenModelRequest {
  readonly modelName: string;
  readonly modelPath: string;
  /** The config's backend: "onnxruntime", or "stateful" (Triton's ONNX stateful backend). */
  readonly backendName: string;
  readonly instanceCount: number;
  /** The model config's `parameters` (session options such as intra_op_thread_count). */
  readonly parameters: Readonly<Record<string, string>>;
  /** Triton's `optimization { graph { level } }`, when set. */
  readonly graphOptimizationLevel: number | undefined;
  /** The version being opened (model code is told which it is). */
  readonly version?: string;
}

export interface OpenedModel {
  /** What the model file declares; undefined when it declares nothing (a handler without metadata). */
  readonly io: ModelIo | undefined;
  readonly executors: ModelExecutor[];
  /**
   * Refuses (throws) inputs the backend could not pass to the model unchanged, when a
   * request arrives, before it shares a batch with other requests.
   */
  readonly checkInputs?: (inputs: ReadonlyMap<string, Tensor>) => void;
}

export interface ModelBackend {
  open(request: OpenModelRequest): Promise<OpenedModel>;
}
