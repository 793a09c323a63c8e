import type { DataType } from "../../src/core/datatype.ts";
import type { ModelIo, ModelTensorInfo } from "../../src/core/model-io.ts";

// What the ONNX files of the fixture models would declare (as the backend reports it).

const TYPE_NAMES: Record<string, string> = {
  FP32: "float32",
  FP16: "float16",
  INT32: "int32",
  INT64: "int64",
  UINT64: "uint64",
  BOOL: "bool",
  BYTES: "string",
};

export function tensor(
  name: string,
  datatype: DataType | undefined,
  shape: number[] | undefined,
  typeName?: string,
): ModelTensorInfo {
  return { name, datatype, typeName: typeName ?? TYPE_NAMES[datatype ?? ""] ?? "unknown", shape };
}

export const MODEL_IO: Record<string, ModelIo> = {
  add_sub: {
    inputs: [tensor("INPUT0", "INT32", [-1, 16]), tensor("INPUT1", "INT32", [-1, 16])],
    outputs: [tensor("OUTPUT0", "INT32", [-1, 16]), tensor("OUTPUT1", "INT32", [-1, 16])],
  },
  image_classifier: {
    inputs: [tensor("data_0", "FP32", [-1, 3, 224, 224])],
    outputs: [tensor("fc6_1", "FP32", [-1, 1, 1000, 1, 1])],
  },
  sequence_direct: {
    inputs: [
      tensor("INPUT", "INT32", [-1, 1]),
      tensor("START", "INT32", [-1, 1]),
      tensor("END", "FP32", [-1, 1]),
      tensor("READY", "BOOL", [-1, 1]),
      tensor("CORRID", "UINT64", [-1, 1]),
    ],
    outputs: [tensor("OUTPUT", "INT32", [-1, 1])],
  },
  sequence_oldest: {
    inputs: [
      tensor("INPUT", "FP32", [-1, -1]),
      tensor("START", "BOOL", [-1, 1]),
      tensor("CORRID", "BYTES", [-1, 1]),
    ],
    outputs: [tensor("OUTPUT", "FP32", [-1, -1])],
  },
  implicit_state: {
    inputs: [
      tensor("INPUT", "FP32", [-1, 4]),
      tensor("START", "INT32", [-1, 1]),
      tensor("ACC_IN", "FP32", [-1, 4]),
      tensor("CACHE_IN", "INT32", [-1, -1, 2]),
    ],
    outputs: [
      tensor("OUTPUT", "FP32", [-1, 4]),
      tensor("ACC_OUT", "FP32", [-1, 4]),
      tensor("CACHE_OUT", "INT32", [-1, -1, 2]),
    ],
  },
  stateful_accumulate: {
    inputs: [
      tensor("Input", "FP32", [-1, -1, 5]),
      tensor("ResetSequence", "INT32", [-1, 1]),
      tensor("EndSequence", "INT32", [-1, 1]),
      tensor("Accumulate_In", "FP32", [4, -1, 5]),
    ],
    outputs: [tensor("Output", "FP32", [-1, -1, 5]), tensor("Accumulate_Out", "FP32", [4, -1, 5])],
  },
  silero_vad: {
    inputs: [
      tensor("input", "FP32", [-1, -1]),
      tensor("state", "FP32", [2, -1, 128]),
      tensor("sr", "INT64", []),
    ],
    outputs: [tensor("output", "FP32", [-1, 1]), tensor("stateN", "FP32", [2, -1, 128])],
  },
  full_options: {
    inputs: [
      tensor("TOKENS", "INT64", [-1, -1]),
      tensor("MASK", "INT64", [-1, -1]),
      tensor("SCALE", "FP16", [4]),
    ],
    outputs: [tensor("LOGITS", "FP32", [-1, 4])],
  },
};
