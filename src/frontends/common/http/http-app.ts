import type { IncomingMessage, Server, ServerResponse } from "node:http";
import Fastify, { type FastifyInstance, type FastifyRequest, LogController } from "fastify";
import type { Logger } from "../../../observability/logger.ts";
import { documentRoutes, type OpenApiInfo } from "./openapi.ts";
import { readRequestBody } from "./request-body.ts";
import { compressResponses } from "./response-compression.ts";

// The fastify server every HTTP protocol family starts from: bodies read once for every
// route, as raw bytes whatever the Content-Type (clients differ), decompressed, within the
// size limit; responses compressed for clients that ask; an OpenAPI document of the routes
// at GET /openapi.json. Each family adds its own error table, and routes with their schemas.

export interface HttpAppOptions {
  readonly logger: Logger;
  /** Largest request body accepted, in bytes, after decompression. */
  readonly bodyLimitBytes: number;
  /** Responses at least this large are compressed when the client allows (Infinity: never). */
  readonly compressMinBytes: number;
  /** How long an idle keep-alive connection stays open, in ms (node's default: 5000). */
  readonly keepAliveTimeoutMs?: number | undefined;
  /** What the OpenAPI document says the server is. */
  readonly openapi: OpenApiInfo;
}

export type HttpApp = FastifyInstance<Server, IncomingMessage, ServerResponse, Logger>;

export function createHttpApp(options: HttpAppOptions): HttpApp {
  const { bodyLimitBytes } = options;
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
  app.addHook("onSend", compressResponses(options.compressMinBytes));
  documentRoutes(app, options.openapi);
  return app;
}
