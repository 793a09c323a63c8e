import type { DataType } from "./datatype.ts";

// The inputs and outputs a model file declares (for ONNX: the session's metadata). Used
// to complete a missing or partial config, to find the batch axis of implicit state,
// and to check a config against the model it describes.

export interface ModelTensorInfo {
  readonly name: string;
  /** undefined when the model's type has no KServe datatype (it cannot be served). */
  readonly datatype: DataType | undefined;
  /** The model's own type name, for messages (e.g. "float32", "bfloat16"). */
  readonly typeName: string;
  /** -1 for a dynamic/symbolic dimension; undefined when the rank itself is unknown. */
  readonly shape: readonly number[] | undefined;
}

export interface ModelIo {
  readonly inputs: readonly ModelTensorInfo[];
  readonly outputs: readonly ModelTensorInfo[];
  /**
   * The ONNX graph's description, read only where it may name the state pairs (backend
   * "stateful" without `state_pairs`): config/resolve/graph-description-pairs.ts.
   */
  readonly graphDescription?: string;
}
