import type { ServerWritableStream } from "@grpc/grpc-js";
import { notFound } from "../../core/errors.ts";
import type { ServerContext } from "../../core/model.ts";
import type { Logger } from "../../observability/logger.ts";
import type { HealthCheckRequestMessage, HealthCheckResponseMessage, ServingStatus } from "./messages.ts";
import { healthServiceDefinition, INFERENCE_SERVICE_NAME } from "./proto-definitions.ts";
import type { GrpcServiceRegistration } from "./service-registration.ts";
import { unary } from "./unary-handler.ts";

// grpc.health.v1.Health: SERVING while the server is ready (Kubernetes gRPC probes, load
// balancers). "" asks about the server as a whole; the inference service has the same
// health; any other name is unknown (NOT_FOUND from Check, SERVICE_UNKNOWN from Watch).

/** How often Watch looks for a change (the context has no change event). */
const WATCH_POLL_MS = 1000;

export function healthService(options: {
  readonly context: ServerContext;
  readonly logger: Logger;
}): GrpcServiceRegistration {
  const { context, logger } = options;
  const known = (service: string | undefined): boolean =>
    service === undefined || service === "" || service === INFERENCE_SERVICE_NAME;
  const current = (): ServingStatus => (context.isReady() ? "SERVING" : "NOT_SERVING");

  const watch = (call: ServerWritableStream<HealthCheckRequestMessage, HealthCheckResponseMessage>): void => {
    const status = (): ServingStatus => (known(call.request.service) ? current() : "SERVICE_UNKNOWN");
    let last = status();
    call.write({ status: last });
    const timer = setInterval(() => {
      const now = status();
      if (now !== last) call.write({ status: (last = now) });
    }, WATCH_POLL_MS);
    timer.unref();
    const stop = (): void => clearInterval(timer);
    call.on("cancelled", stop);
    call.on("close", stop);
    call.on("error", stop);
  };

  return {
    definition: healthServiceDefinition(),
    implementation: {
      Check: unary(logger, "Check", (m: HealthCheckRequestMessage): HealthCheckResponseMessage => {
        if (!known(m.service)) throw notFound(`unknown service '${m.service}'`);
        return { status: current() };
      }),
      Watch: watch,
    },
  };
}
