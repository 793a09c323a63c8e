import type { IncomingMessage, Server, ServerResponse } from "node:http";
import fastifyWebsocket from "@fastify/websocket";
import Fastify, { type FastifyInstance, type FastifyRequest, LogController } from "fastify";
import type { ServerContext } from "../../core/model.ts";
import type { Logger } from "../../observability/logger.ts";
import { tfsRestRoutes } from "../tfs/rest-routes.ts";
import { createErrorHandler, sendError } from "./error-reply.ts";
import { KSERVE_HTTP_STATUS } from "./error-status.ts";
import { kserveRoutes } from "./kserve-routes.ts";
import { readRequestBody } from "./request-body.ts";
import { compressResponses } from "./response-compression.ts";
import { sequenceRoutes } from "./sequence-routes.ts";
import { onStreamError, streamRoutes } from "./websocket/stream-routes.ts";

// The HTTP frontend: one fastify instance serving each protocol family from its own
// route plugin (KServe v2, seqserve's sequence endpoints and WebSocket streams, TF-Serving
// REST),
// each with its own error table. Bodies are read here, once, for every route: raw bytes
// whatever the Content-Type (clients differ), decompressed, within the size limit.

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
  /** How long an idle keep-alive connection stays open, in ms (node's default: 5000). */
  readonly keepAliveTimeoutMs?: number;
  /** Messages in flight per WebSocket stream before it stops reading (default 64). */
  readonly streamMaxInFlight?: number;
}

export type HttpFrontend = FastifyInstance<Server, IncomingMessage, ServerResponse, Logger>;

/** The HTTP server, routes registered, not listening: the caller calls `listen`. */
export function createHttpFrontend(options: HttpFrontendOptions): HttpFrontend {
  const { context, bodyLimitBytes } = options;
  const app = Fastify({
    loggerInstance: options.logger,
    // One log line per request is too much at thousands of requests per second.
    logController: new LogController({ disableRequestLogging: true }),
    bodyLimit: bodyLimitBytes,
    ...(options.keepAliveTimeoutMs === undefined ? {} : { keepAliveTimeout: options.keepAliveTimeoutMs }),
    routerOptions: { ignoreTrailingSlash: true, maxParamLength: 2048 },
  });

  app.removeAllContentTypeParsers();
  app.addContentTypeParser("*", (request: FastifyRequest, payload: IncomingMessage) =>
    readRequestBody(payload, request.headers, bodyLimitBytes),
  );

  app.addHook("onSend", compressResponses(options.compressMinBytes ?? 1024));
  app.setErrorHandler(createErrorHandler(KSERVE_HTTP_STATUS, bodyLimitBytes));
  app.setNotFoundHandler((request, reply) =>
    sendError(reply, 404, `Not Found: no route for ${request.method} ${request.url}`),
  );

  // WebSocket streams share the port; a message may be as large as a request body.
  app.register(fastifyWebsocket, { options: { maxPayload: bodyLimitBytes }, errorHandler: onStreamError });
  app.register(kserveRoutes, { context, bodyLimitBytes });
  app.register(sequenceRoutes, { context, bodyLimitBytes });
  app.register(tfsRestRoutes, { context, bodyLimitBytes });
  app.register(streamRoutes, {
    context,
    bodyLimitBytes,
    ...(options.streamMaxInFlight === undefined ? {} : { maxInFlight: options.streamMaxInFlight }),
  });
  return app;
}
