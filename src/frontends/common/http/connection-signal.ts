import { setMaxListeners } from "node:events";
import type { FastifyReply, FastifyRequest } from "fastify";

// Cancellation for HTTP answers that are one message (a request to model.infer): one abort
// signal per connection, aborted when the connection closes. Over HTTP/1.1 the only way an
// answer that has not been sent can be lost is its connection closing (the response closes
// early only then), so a request still waiting for the model when its connection closes is
// given up, as watchDisconnect's signal of its own would have it. A signal of its own costs
// every request an AbortController and its first listener: about 20 µs of the main thread's
// 500 µs for a small stateless request. Requests listen to the shared signal only while
// they are unanswered (the core removes its listener when a request settles), as the
// requests of a gRPC stream or a WebSocket connection do with theirs.
//
// Not for streamed answers (model.stream): a decoupled model's request joins its signal
// to another (AbortSignal.any), and Node keeps a reference to every such join in the
// source signal for as long as the source lives.

const signals = new WeakMap<object, AbortSignal>();

/** The signal of the connection `request` came on; an aborted one if it is already closed. */
export function connectionSignal(request: FastifyRequest, reply: FastifyReply): AbortSignal {
  const socket = request.raw.socket;
  if (reply.raw.destroyed || socket === null || socket.destroyed) return AbortSignal.abort();
  let signal = signals.get(socket);
  if (signal === undefined) {
    const controller = new AbortController();
    signal = controller.signal;
    // Pipelined requests on one connection each listen while they wait.
    setMaxListeners(0, signal);
    socket.once("close", () => controller.abort());
    signals.set(socket, signal);
  }
  return signal;
}
