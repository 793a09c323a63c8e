import type { InferRequest, InferResponse } from "../../../core/infer.ts";
import type { ServedModel } from "../../../core/model.ts";
import type { InferResponseStream } from "../../../core/response-stream.ts";
import type { ConnectionBudget } from "../response-budget.ts";

// Relaying the responses of one request to a streaming client (gRPC ModelStreamInfer, a
// WebSocket stream), as Triton does for decoupled models: every response carries
// `triton_final_response` (true on the request's last), and a client that sets
// `triton_enable_empty_final_response` also gets an empty response marking the end when
// the model's last response did not say it was the last.

const FINAL_RESPONSE = "triton_final_response";
export const ENABLE_EMPTY_FINAL = "triton_enable_empty_final_response";

/** Where the responses waiting to be relayed are counted: the connection's budget. */
export interface WaitingResponses {
  readonly budget: ConnectionBudget;
  /** The budget has no room for a response that has arrived: the stream must end. */
  readonly overflow: () => void;
}

/**
 * Sends each response of `stream` in order through `send`, which returns a promise while
 * the client must catch up (then the next response waits: the model's sending slows down
 * too). Rejects with the request's error after the responses sent before it.
 *
 * A slow client slows each request's model down, but every request of a stream may have
 * responses waiting before it reads them (16 / 4 MiB each for a handler): those are
 * counted in `waiting.budget` from their arrival, so that what a connection holds is
 * bounded in all, not per request.
 *
 * `namedAs`: the model's name and version as the empty final response gives them (Triton's
 * gRPC stream echoes the request's, an empty version when it named none); the model's
 * own when unset.
 */
export async function relayResponses(
  model: ServedModel,
  stream: InferResponseStream,
  request: InferRequest,
  send: (response: InferResponse) => void | Promise<void>,
  waiting?: WaitingResponses,
  namedAs?: { readonly modelName: string; readonly modelVersion: string },
): Promise<void> {
  let counted = 0;
  let overflowed = false;
  if (waiting !== undefined) {
    stream.onWaiting?.((change) => {
      if (change < 0) {
        const back = Math.min(counted, -change);
        counted -= back;
        waiting.budget.give(back);
      } else if (overflowed) {
        // The stream is ending: what arrives now is dropped with it, uncounted.
      } else if (waiting.budget.take(change)) {
        counted += change;
      } else {
        overflowed = true;
        waiting.overflow();
      }
    });
  }
  try {
    let finalSent = false;
    for await (const response of stream) {
      finalSent ||= response.final;
      const { final, ...rest } = response;
      const sending = send({ ...rest, parameters: { ...rest.parameters, [FINAL_RESPONSE]: final } });
      if (sending !== undefined) await sending;
    }
    if (!finalSent && request.parameters[ENABLE_EMPTY_FINAL] === true) {
      await send({
        modelName: namedAs?.modelName ?? model.name,
        modelVersion: namedAs?.modelVersion ?? model.version,
        id: request.id,
        parameters: { ...stream.parameters, [FINAL_RESPONSE]: true },
        outputs: [],
      });
    }
  } finally {
    waiting?.budget.give(counted);
    counted = 0;
  }
}
