import fastifyWebsocket from "@fastify/websocket";
import type { Registry } from "prom-client";
import type { ServerContext } from "../../core/model.ts";
import type { Logger } from "../../observability/logger.ts";
import { createErrorHandler, sendError } from "../common/http/error-reply.ts";
import { createHttpApp, type HttpApp, type HttpAppOptions } from "../common/http/http-app.ts";
import { unroutedAnswer } from "../common/http/route-methods.ts";
import { KSERVE_HTTP_STATUS } from "../common/kserve/error-status.ts";
import type { ResponseBudgets } from "../common/response-budget.ts";
import { ovmsUnsupportedMethod } from "../tfs/error-status.ts";
import { tfsRestRoutes } from "../tfs/rest-routes.ts";
import { generateRoutes } from "./generate/generate-routes.ts";
import { kserveRoutes } from "./kserve-routes.ts";
import { sequenceRoutes } from "./sequence-routes.ts";
import { CLOSE_CODES } from "./websocket/close-codes.ts";
import { onStreamError, streamRoutes } from "./websocket/stream-routes.ts";

// The HTTP frontend: one fastify instance serving each protocol family from its own
// route plugin (KServe v2, seqserve's sequence endpoints and WebSocket streams, TF-Serving
// REST), each with its own error table. Bodies are read once for every route (common/http).

export interface HttpFrontendOptions {
  readonly context: ServerContext;
  readonly logger: Logger;
  /** Largest request body accepted, in bytes, after decompression. */
  readonly bodyLimitBytes: number;
  /**
   * Responses at least this large are compressed when the client's Accept-Encoding allows
   * (default 1024; Infinity never compresses).
   */
  readonly compressMinBytes?: number;
  /** Messages in flight per WebSocket stream before it stops reading (default 64). */
  readonly streamMaxInFlight?: number;
  /** Request bytes in flight per WebSocket stream before it stops reading (default unbounded). */
  readonly streamMaxHeldRequestBytes?: number;
  /** A WebSocket stream with no message and nothing in flight this long is closed; undefined = never. */
  readonly streamIdleTimeoutMs?: number;
  /** Per-connection budgets of answers waiting for slow readers (WebSocket, SSE). */
  readonly budgets?: ResponseBudgets;
  /** Connection and time limits, TLS, access control (see createHttpApp). */
  readonly limits?: HttpAppOptions["limits"];
  readonly tls?: HttpAppOptions["tls"];
  readonly access?: HttpAppOptions["access"];
  readonly refusals?: HttpAppOptions["refusals"];
  /** Serves `GET /metrics` from this registry (OpenVINO Model Server's metrics on its REST port). */
  readonly metrics?: Registry;
}

export type HttpFrontend = HttpApp;

/** The HTTP server, routes registered, not listening: the caller calls `listen`. */
export function createHttpFrontend(options: HttpFrontendOptions): HttpFrontend {
  const { context, bodyLimitBytes } = options;
  const app = createHttpApp({
    logger: options.logger,
    bodyLimitBytes,
    compressMinBytes: options.compressMinBytes ?? 1024,
    openapi: {
      title: "seqserve: KServe v2 / Triton HTTP API",
      version: context.metadata.version,
      description:
        "Inference, health, metadata, configuration, statistics and repository control as Triton serves them, " +
        "with the sequence extension; seqserve's sequence endpoints and WebSocket sequence streams.",
    },
    limits: options.limits,
    tls: options.tls,
    answerUnrouted: (request, reply, allowed) => {
      const { status, message } =
        ovmsUnsupportedMethod(request.method, request.url) ?? unroutedAnswer(request, reply, allowed);
      return sendError(reply, status, message);
    },
    access: options.access,
    refusals: options.refusals,
  });
  app.setErrorHandler(createErrorHandler(KSERVE_HTTP_STATUS, bodyLimitBytes));

  // A stopping server closes its streams with 1001 (going away), as RFC 6455 has it. The
  // plugin's own close (its preClose, which runs after this hook) sends no code, which a
  // client reads, as the stream does, as a close it asked for itself.
  app.addHook("preClose", (done) => {
    for (const client of app.websocketServer?.clients ?? [])
      client.close(CLOSE_CODES.goingAway, "the server is stopping");
    done();
  });
  // WebSocket streams share the port; a message may be as large as a request body.
  app.register(fastifyWebsocket, { options: { maxPayload: bodyLimitBytes }, errorHandler: onStreamError });
  app.register(kserveRoutes, { context, bodyLimitBytes });
  const metrics = options.metrics;
  if (metrics !== undefined) {
    app.get(
      "/metrics",
      {
        schema: {
          operationId: "metrics",
          summary: "The metrics, in Prometheus' text format (OVMS's --metrics_enable)",
        },
      },
      async (_request, reply) => reply.type(metrics.contentType).send(await metrics.metrics()),
    );
  }
  app.register(generateRoutes, {
    context,
    bodyLimitBytes,
    ...(options.budgets === undefined ? {} : { budgets: options.budgets }),
    ...(options.streamIdleTimeoutMs === undefined ? {} : { idleTimeoutMs: options.streamIdleTimeoutMs }),
  });
  app.register(sequenceRoutes, { context, bodyLimitBytes });
  app.register(tfsRestRoutes, { context, bodyLimitBytes });
  app.register(streamRoutes, {
    context,
    bodyLimitBytes,
    ...(options.streamMaxInFlight === undefined ? {} : { maxInFlight: options.streamMaxInFlight }),
    ...(options.streamMaxHeldRequestBytes === undefined
      ? {}
      : { maxHeldRequestBytes: options.streamMaxHeldRequestBytes }),
    ...(options.streamIdleTimeoutMs === undefined ? {} : { idleTimeoutMs: options.streamIdleTimeoutMs }),
    ...(options.budgets === undefined ? {} : { budgets: options.budgets }),
    ...(options.refusals === undefined ? {} : { refusals: options.refusals }),
  });
  return app;
}
