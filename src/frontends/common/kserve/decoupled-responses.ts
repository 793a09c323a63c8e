import type { InferRequest, InferResponse } from "../../../core/infer.ts";
import type { ServedModel } from "../../../core/model.ts";
import type { InferResponseStream } from "../../../core/response-stream.ts";

// Relaying the responses of one request to a streaming client (gRPC ModelStreamInfer, a
// WebSocket stream), as Triton does for decoupled models: every response carries
// `triton_final_response` (true on the request's last), and a client that sets
// `triton_enable_empty_final_response` also gets an empty response marking the end when
// the model's last response did not say it was the last.

export const FINAL_RESPONSE = "triton_final_response";
export const ENABLE_EMPTY_FINAL = "triton_enable_empty_final_response";

/**
 * Sends each response of `stream` in order through `send`, which returns a promise while
 * the client must catch up (then the next response waits: the model's sending slows down
 * too). Rejects with the request's error after the responses sent before it.
 */
export async function relayResponses(
  model: ServedModel,
  stream: InferResponseStream,
  request: InferRequest,
  send: (response: InferResponse) => void | Promise<void>,
): Promise<void> {
  let finalSent = false;
  for await (const response of stream) {
    finalSent ||= response.final;
    const { final, ...rest } = response;
    const waiting = send({ ...rest, parameters: { ...rest.parameters, [FINAL_RESPONSE]: final } });
    if (waiting !== undefined) await waiting;
  }
  if (!finalSent && request.parameters[ENABLE_EMPTY_FINAL] === true) {
    await send({
      modelName: model.name,
      modelVersion: model.version,
      id: request.id,
      parameters: { ...stream.parameters, [FINAL_RESPONSE]: true },
      outputs: [],
    });
  }
}
