import type { InferRequest } from "../../core/infer.ts";

// A caller's W3C trace context (`traceparent` and `tracestate`, as HTTP headers or gRPC
// metadata) goes with its request, so a traced request joins the caller's trace. The
// request is copied only when a context came; most requests carry none.

export function withTraceContext(
  request: InferRequest,
  traceparent: unknown,
  tracestate: unknown,
): InferRequest {
  if (typeof traceparent !== "string" || traceparent === "") return request;
  return {
    ...request,
    trace: { traceparent, tracestate: typeof tracestate === "string" ? tracestate : undefined },
  };
}
