import { isUtf8 } from "node:buffer";
import { invalidArg } from "../../core/errors.ts";
import type { BytesElements, Tensor } from "../../core/tensor.ts";

// What ONNX Runtime for Node.js can take as a string element. Its binding hands strings to
// the runtime as C strings, so an element is cut at its first NUL byte ("a\0b" reaches the
// model as "a"), and it takes JavaScript strings, so bytes that are not UTF-8 would be
// replaced. Either would change the data silently: such elements are refused instead,
// when the request arrives (before it shares a batch with other requests).

/** Throws INVALID_ARG naming the element when a BYTES input holds one ONNX Runtime would alter. */
export function checkStringInputs(inputs: ReadonlyMap<string, Tensor>): void {
  for (const [name, tensor] of inputs) {
    if (tensor.datatype !== "BYTES") continue;
    const elements = tensor.data as BytesElements;
    for (let i = 0; i < elements.length; i++) {
      const element = elements[i]!;
      const nul = element.indexOf(0);
      if (nul !== -1) {
        throw invalidArg(
          `element ${i} of BYTES input '${name}' holds a NUL byte (at offset ${nul}), which ONNX Runtime string tensors cannot carry: the string would be cut there`,
        );
      }
      // Checked without making a string of it: the worker decodes it once, for the model.
      if (!isUtf8(element)) {
        throw invalidArg(
          `element ${i} of BYTES input '${name}' is not valid UTF-8, which ONNX Runtime string tensors require`,
        );
      }
    }
  }
}
