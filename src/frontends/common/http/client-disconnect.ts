import type { FastifyReply, FastifyRequest } from "fastify";

// Cancellation for HTTP: a request whose client hangs up before its answer is sent is
// aborted, so the scheduler can drop it instead of running the model for nobody.

export interface DisconnectWatch {
  readonly signal: AbortSignal;
  /** Stops watching (call once the answer is ready). */
  dispose(): void;
}

export function watchDisconnect(request: FastifyRequest, reply: FastifyReply): DisconnectWatch {
  const controller = new AbortController();
  const response = reply.raw;
  // The response closes early only when the connection is gone before the answer ended.
  const onClose = (): void => {
    if (!response.writableFinished) controller.abort();
  };
  if (response.destroyed || request.raw.socket?.destroyed === true) controller.abort();
  else response.once("close", onClose);
  return {
    signal: controller.signal,
    dispose: () => response.off("close", onClose),
  };
}
