import type { InferResponse } from "../../core/infer.ts";
import type { SharedMemoryHold } from "../common/kserve/shared-memory-tensors.ts";
import { encodeRawTensor } from "../common/raw-tensor.ts";
import { writeParameters } from "./infer-parameters.ts";
import type {
  InferOutputTensorMessage,
  ModelInferResponseMessage,
  ModelStreamInferResponseMessage,
} from "./messages.ts";

// InferResponse → ModelInferResponse. Outputs always travel in raw_output_contents, as
// Triton sends them: numeric outputs are views of the response's arrays (the only copy is
// protobuf's own, into the outgoing message), and every Triton client reads this form.

const EMPTY = new Uint8Array(0);

/** Encodes a response; the outputs in `sharedMemory` are written there, and travel empty. */
export function encodeInferResponse(
  response: InferResponse,
  sharedMemory?: SharedMemoryHold,
): ModelInferResponseMessage {
  const count = response.outputs.length;
  const outputs: InferOutputTensorMessage[] = new Array(count);
  const raw: Uint8Array[] = new Array(count);
  for (let i = 0; i < count; i++) {
    const output = response.outputs[i]!;
    outputs[i] = { name: output.name, datatype: output.datatype, shape: output.shape };
    const slice = sharedMemory?.outputs.get(output.name);
    if (slice === undefined) {
      raw[i] = encodeRawTensor(output);
    } else {
      sharedMemory!.use.write(slice, output.name, encodeRawTensor(output));
      // As Triton: every output has its raw_output_contents entry, in shared memory an empty one.
      raw[i] = EMPTY;
    }
  }
  return {
    model_name: response.modelName,
    model_version: response.modelVersion,
    id: response.id,
    parameters: writeParameters(response.parameters),
    outputs,
    raw_output_contents: raw,
  };
}

/** The in-band error of ModelStreamInfer: Triton sends the message and the failed request's id. */
export function streamError(message: string, requestId: string | undefined): ModelStreamInferResponseMessage {
  return { error_message: message, infer_response: { id: requestId ?? "" } };
}
