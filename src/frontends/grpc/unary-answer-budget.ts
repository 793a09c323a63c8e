import {
  ServerInterceptingCall,
  type ServerInterceptingCallInterface,
  type ServerInterceptor,
} from "@grpc/grpc-js";
import { ServerError } from "../../core/errors.ts";
import type { ConnectionBudget, ResponseBudgets } from "../common/response-budget.ts";
import { statusOf } from "./error-status.ts";
import { statusTableOf } from "./service-status-table.ts";

// Unary answers in the connection's byte budget (--max-buffered-response-bytes), as
// streams' answers are: a client that sends calls and reads none of their answers made
// grpc-js hold every answer, without bound (100 calls of 8 MiB took 2.5 GB).
//
// - A call that arrives while its connection holds half of its budget in unread answers
//   is refused (RESOURCE_EXHAUSTED) before it runs: nothing is applied, and a client that
//   reads its answers never comes near it.
// - An answer is counted from when it is sent until grpc-js has handed it to HTTP/2 (then
//   it sends the status), or the call ends. An answer that would take the connection past
//   the whole budget is dropped, and the call ends with RESOURCE_EXHAUSTED.
//
// Answers are counted at their encoded size: the handlers that can answer large messages
// (ModelInfer, TF-Serving's Predict) send them encoded; other answers are small and not counted.

const REFUSED =
  "the connection's unread answers fill its budget (--max-buffered-response-bytes): read them, then retry";

export function unaryAnswerBudget(budgets: ResponseBudgets): ServerInterceptor {
  return (method, call: ServerInterceptingCallInterface) => {
    if (method.requestStream || method.responseStream) return new ServerInterceptingCall(call);
    const peer = call.getPeer();
    let budget: ConnectionBudget | undefined;
    let held = 0;
    let refused = false;
    /** Cancelled: grpc-js still passes the handler's answer on, then drops it unsent. */
    let cancelled = false;
    const giveBack = (): void => {
      if (budget === undefined) return;
      budget.give(held);
      budget.release();
      budget = undefined;
    };
    const refuse = (details: string): void => {
      refused = true;
      call.sendStatus(statusOf(new ServerError("RESOURCE_EXHAUSTED", details), statusTableOf(method.path)));
    };
    return new ServerInterceptingCall(call, {
      start: (next) =>
        next({
          onReceiveMessage: (message, forward) => {
            if (budgets.saturated(peer)) {
              budgets.refusals?.refused("buffered_response_bytes");
              refuse(REFUSED);
              return;
            }
            forward(message);
          },
          // A refused call's handler never saw its message: it must not answer for it.
          onReceiveHalfClose: (forward) => {
            if (!refused) forward();
          },
          onCancel: () => {
            cancelled = true;
            giveBack();
          },
        }),
      sendMessage: (message, next) => {
        // Nothing sends an ended call's answer, and nothing would give its bytes back.
        if (cancelled || refused || !(message instanceof Uint8Array)) {
          next(message);
          return;
        }
        const connection = budgets.acquire(peer);
        if (!connection.take(message.byteLength)) {
          connection.release();
          refuse(`the answer (${message.byteLength} bytes) is dropped: ${connection.refusal}`);
          return;
        }
        budget = connection;
        held = message.byteLength;
        next(message);
      },
      sendStatus: (sent, next) => {
        giveBack();
        next(sent);
      },
    });
  };
}
