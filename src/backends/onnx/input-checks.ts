import { invalidArg } from "../../core/errors.ts";
import { formatShape, type Tensor } from "../../core/tensor.ts";
import { checkStringInputs } from "./string-inputs.ts";

// What a request's inputs must be for ONNX Runtime to take them without harm, checked
// before the request is queued.

/**
 * No input may be empty: some models make ONNX Runtime abort the whole process on a
 * tensor with a zero dimension (Silero VAD, given a batch of 0, does), and a worker thread
 * cannot contain an abort. Then BYTES elements must be strings ONNX Runtime can hold.
 */
export function checkOnnxInputs(inputs: ReadonlyMap<string, Tensor>): void {
  for (const [name, tensor] of inputs) {
    if (tensor.shape.includes(0)) {
      throw invalidArg(
        `input '${name}' has no elements (shape ${formatShape(tensor.shape)}): ONNX models are not run on empty tensors, which ONNX Runtime may not survive`,
      );
    }
  }
  checkStringInputs(inputs);
}
