import ort from "onnxruntime-node";
import { ortTensorType } from "../backends/onnx/onnx-types.ts";
import type { NumericArray } from "../core/datatype.ts";
import type { Tensor } from "../core/tensor.ts";

// A tensor as ONNX Runtime in this process takes it, for the runs the bench makes beside
// the server's (the in-process limit, the oracle): BYTES elements as strings, as ONNX
// Runtime's Node.js API takes string tensors.

export function toOrt(tensor: Tensor): ort.Tensor {
  const type = ortTensorType(tensor.datatype);
  if (type === undefined) throw new Error(`the bench cannot feed ${tensor.datatype} to ONNX Runtime`);
  const data =
    tensor.datatype === "BYTES"
      ? (tensor.data as readonly Uint8Array[]).map((e) => Buffer.from(e).toString("utf8"))
      : (tensor.data as NumericArray);
  return new ort.Tensor(type, data as never, tensor.shape as number[]);
}
