import type { IncomingMessage, Server, ServerResponse } from "node:http";
import type { Socket } from "node:net";
import Fastify, {
  type FastifyInstance,
  type FastifyReply,
  type FastifyRequest,
  LogController,
} from "fastify";
import type { TlsOptions } from "../../../config/security-options.ts";
import type { Refusals } from "../../../core/refusals.ts";
import type { Logger } from "../../../observability/logger.ts";
import type { AccessPolicy } from "../access/access-policy.ts";
import { type CorsHeaders, guardHttpApp } from "../access/http-access.ts";
import { closeConnectionsOnceIdle } from "./close-connections.ts";
import { type ErrorBody, KSERVE_ERROR_BODY } from "./error-reply.ts";
import { FirstRequestTimeout } from "./first-request-timeout.ts";
import { HttpError } from "./http-error.ts";
import { DESCRIBING_SCHEMAS, documentRoutes, type OpenApiInfo } from "./openapi.ts";
import { BodyTooLargeError, readRequestBody } from "./request-body.ts";
import { compressResponses } from "./response-compression.ts";
import { learnRouteMethods } from "./route-methods.ts";

declare module "fastify" {
  interface FastifyRequest {
    /** When the request's head was read, on the `performance.now()` clock in ns. */
    receivedNs: number;
  }
}

// The fastify server every HTTP protocol family starts from: bodies read once for every
// route, as raw bytes whatever the Content-Type (clients differ), decompressed, within the
// size limit; responses compressed for clients that ask; an OpenAPI document of the routes
// at GET /openapi.json. Each family adds its own error table, and routes with their schemas.
// What a client can make it hold is bounded: connections, the request head, the time to
// send headers and a whole request, idle keep-alive connections; and access control
// (http-access.ts) runs before anything else a request does.

/** Connection and time limits of an HTTP server. */
export interface HttpLimits {
  readonly maxConnections: number;
  readonly maxHeaderBytes: number;
  readonly headerTimeoutMs: number;
  readonly requestTimeoutMs: number;
  readonly keepAliveTimeoutMs: number;
}

export interface HttpAppOptions {
  readonly logger: Logger;
  /** Largest request body accepted, in bytes, after decompression. */
  readonly bodyLimitBytes: number;
  /** Responses at least this large are compressed when the client allows (Infinity: never). */
  readonly compressMinBytes: number;
  /** What the OpenAPI document says the server is. */
  readonly openapi: OpenApiInfo;
  /** Connection and time limits (node's and fastify's defaults when absent). */
  readonly limits?: HttpLimits | undefined;
  /** HTTPS with these certificates. */
  readonly tls?: TlsOptions | undefined;
  /** Who may call which route, and from which web origins. */
  readonly access?:
    | { readonly policy: AccessPolicy; readonly corsAllowOrigins: readonly string[] }
    | undefined;
  readonly refusals?: Refusals | undefined;
  /** Headers of the API family a browser page may send and read (CORS), beyond KServe's. */
  readonly corsHeaders?: CorsHeaders | undefined;
  /** The error body of refusals written before a request reaches the app (a head too large, a request too slow); default `{"error": …}`. */
  readonly errorBody?: ErrorBody | undefined;
  /**
   * Answers a request no route serves, in the family's error form: `allowed` lists the
   * methods its path is served under (405), empty when no route has the path (404).
   */
  readonly answerUnrouted: (
    request: FastifyRequest,
    reply: FastifyReply,
    allowed: readonly string[],
  ) => unknown;
}

export type HttpApp = FastifyInstance<Server, IncomingMessage, ServerResponse, Logger>;

function httpsOptions(tls: TlsOptions): Record<string, unknown> {
  return {
    cert: tls.cert,
    key: tls.key,
    ...(tls.rootCert === undefined ? {} : { ca: tls.rootCert }),
    ...(tls.mutual ? { requestCert: true, rejectUnauthorized: true } : {}),
  };
}

/** Sockets whose refusal waits for an earlier request's answer to go out. */
const refusalsWaiting = new WeakSet<Socket>();

/**
 * A refusal written straight to a socket whose request never reached a route, or never
 * arrived whole. Answers go out in the order of their requests, so the refusal goes where
 * the client will take it for the answer to the request that failed. The answer node keeps
 * outstanding on the socket is that request's own when its request did not arrive whole
 * (a body that could not be parsed, or did not come in time): the refusal takes its place
 * if it has not begun (node's own handler's test), else the connection is closed. An
 * earlier request's answer (its request arrived whole: what failed came after it, a
 * pipelined head, or the rest of a body longer than its Content-Length) goes out first,
 * with every other earlier request's after it, and the refusal last; destroying the socket
 * lost those answers too. Node's parser stops at the error, so the refusal ends the
 * connection.
 */
function refuseOnSocket(
  socket: Socket,
  status: number,
  reason: string,
  message: string,
  errorBody: ErrorBody,
): void {
  // One refusal per connection: a parser that has failed fails again on any byte that follows.
  if (refusalsWaiting.has(socket)) return;
  // Node keeps the answer outstanding on a socket as `_httpMessage` (null once it went out).
  const outstanding = (socket as Socket & { _httpMessage?: ServerResponse | null })._httpMessage ?? undefined;
  // An earlier request's answer, still to go out: the refusal follows it. Node hands the
  // socket to the next answer (detaching this one) only on its `finish`, so one that holds
  // the socket has not finished, even written whole (writableFinished): one answered while
  // it waited behind another is written at once when handed the socket. Each answer is
  // waited for in turn, the refusal after the last: pipelined answers go out in order.
  if (outstanding?.req.complete === true) {
    refusalsWaiting.add(socket);
    // Node's own listener, added first, has handed the socket to the next answer by then.
    outstanding.once("finish", () => {
      refusalsWaiting.delete(socket);
      refuseOnSocket(socket, status, reason, message, errorBody);
    });
    return;
  }
  // The earlier answer was the connection's last (connection: close): it closes once sent.
  if (socket.writableEnded) return;
  if (!socket.writable || outstanding?.headersSent === true) {
    socket.destroy();
    return;
  }
  const { headers, body } = errorBody(status, message);
  const head = Object.entries(headers)
    .map(([name, value]) => `${name}: ${value}\r\n`)
    .join("");
  socket.end(
    `HTTP/1.1 ${status} ${reason}\r\nconnection: close\r\n${head}content-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
  );
}

export function createHttpApp(options: HttpAppOptions): HttpApp {
  const { bodyLimitBytes, limits, refusals } = options;
  const errorBody = options.errorBody ?? KSERVE_ERROR_BODY;
  const keepAliveTimeoutMs = limits?.keepAliveTimeoutMs;
  const app = Fastify({
    loggerInstance: options.logger,
    // One log line per request is too much at thousands of requests per second.
    logController: new LogController({ disableRequestLogging: true }),
    bodyLimit: bodyLimitBytes,
    schemaController: DESCRIBING_SCHEMAS,
    ...(keepAliveTimeoutMs === undefined ? {} : { keepAliveTimeout: keepAliveTimeoutMs }),
    ...(limits === undefined
      ? {}
      : {
          requestTimeout: limits.requestTimeoutMs,
          http: {
            maxHeaderSize: limits.maxHeaderBytes,
            // How often node looks for requests past their time (its default, 30 s, would
            // let a request live up to 30 s past its limit).
            connectionsCheckingInterval: Math.max(
              250,
              Math.min(30_000, limits.headerTimeoutMs / 4, limits.requestTimeoutMs / 4),
            ),
          },
        }),
    ...(options.tls === undefined ? {} : { https: httpsOptions(options.tls) }),
    routerOptions: { ignoreTrailingSlash: true, maxParamLength: 2048 },
    // Requests that arrive while the server closes are refused by the hook below, through
    // the family's error handler (fastify's own 503 has none of the family's form).
    return503OnClosing: false,
    // A path the router cannot read (a bad percent-encoding, a segment past
    // maxParamLength) is answered in the family's form, not fastify's, and without
    // echoing the path back.
    frameworkErrors: (error, request, reply: FastifyReply) => {
      // Answered without the hooks: its connection has begun its requests all the same.
      firstRequest?.begun(request.raw.socket);
      // A WebSocket upgrade's socket has left node's HTTP handling (no timeout applies):
      // refused, it is closed once answered, as the onResponse hook below closes others
      // (framework errors skip the hooks).
      if (request.headers.upgrade !== undefined) {
        reply.header("connection", "close");
        reply.raw.once("finish", () => request.raw.socket?.destroy());
      }
      const code = (error as { code?: string }).code;
      const [status, message] =
        code === "FST_ERR_BAD_URL"
          ? [400, "the request's path is not valid: a percent-encoding in it does not decode"]
          : code === "FST_ERR_MAX_PARAM_LENGTH"
            ? [414, "a segment of the request's path is longer than the 2048 characters allowed"]
            : [400, "the request is not valid"];
      const { headers, body } = errorBody(status, message);
      void reply.code(status).headers(headers).type("application/json").send(body);
    },
    // Requests refused before fastify sees them (a head too large, a request too slow)
    // are answered with the reason and counted.
    clientErrorHandler: (error: NodeJS.ErrnoException, socket: Socket) => {
      if (error.code === "ECONNRESET" || socket.destroyed) return;
      if (error.code === "HPE_HEADER_OVERFLOW") {
        refusals?.refused("http_header_bytes");
        refuseOnSocket(
          socket,
          431,
          "Request Header Fields Too Large",
          `the request head is larger than the limit of ${limits?.maxHeaderBytes ?? 16384} bytes`,
          errorBody,
        );
      } else if (error.code === "ERR_HTTP_REQUEST_TIMEOUT") {
        refusals?.refused("http_request_timeout");
        refuseOnSocket(socket, 408, "Request Timeout", "the request was not received in time", errorBody);
      } else {
        refuseOnSocket(socket, 400, "Bad Request", "the request is not valid HTTP", errorBody);
      }
    },
  }) as unknown as HttpApp;
  const firstRequest =
    limits === undefined ? undefined : new FirstRequestTimeout(app.server, limits.headerTimeoutMs, refusals);
  if (limits !== undefined) {
    app.server.headersTimeout = limits.headerTimeoutMs;
    app.server.maxConnections = limits.maxConnections;
    app.server.on("drop", () => refusals?.refused("http_connections"));
  }
  let closing = false;
  app.decorateRequest("receivedNs", 0);
  app.addHook("onRequest", (request, _reply, done) => {
    // When its head was read: Triton's HTTP_RECV_START, for tracing.
    request.receivedNs = performance.now() * 1e6;
    firstRequest?.begun(request.raw.socket);
    if (!closing) done();
    else
      done(
        new HttpError(503, "the server is stopping: it takes no new requests", {
          connection: "close",
          "retry-after": "1",
        }),
      );
  });
  if (options.access !== undefined)
    guardHttpApp(app as unknown as FastifyInstance, {
      ...options.access,
      refusals,
      corsHeaders: options.corsHeaders,
    });
  // A client that asks before sending its body (Expect: 100-continue, as curl does for a
  // large one) and declares more than the limit is refused then, not after sending it all.
  app.server.on("checkContinue", (request: IncomingMessage, response: ServerResponse) => {
    const declared = Number(request.headers["content-length"]);
    if (Number.isFinite(declared) && declared > bodyLimitBytes) {
      refusals?.refused("http_body_bytes");
      const { headers, body } = errorBody(413, new BodyTooLargeError(bodyLimitBytes).message);
      response.writeHead(413, { ...headers, "content-type": "application/json", connection: "close" });
      response.end(body);
      return;
    }
    response.writeContinue();
    app.server.emit("request", request, response);
  });
  app.removeAllContentTypeParsers();
  app.addContentTypeParser("*", (request: FastifyRequest, payload: IncomingMessage) =>
    readRequestBody(payload, request.headers, bodyLimitBytes),
  );
  app.addHook("onError", async (_request, _reply, error) => {
    const status = error instanceof HttpError ? error.status : (error as { statusCode?: unknown }).statusCode;
    if (status === 413) refusals?.refused("http_body_bytes");
  });
  // A WebSocket upgrade refused with an HTTP answer (a 401 from access control, which runs
  // before the WebSocket plugin's own hooks) closes its connection once answered: node has
  // handed the socket over for the upgrade, and left open it would outlive the server.
  // Callback style, as every hook that runs on each request: no promise per request.
  app.addHook("onResponse", (request, reply, done) => {
    if (request.headers.upgrade !== undefined && reply.statusCode >= 400) request.raw.socket?.destroy();
    done();
  });
  app.addHook("onSend", compressResponses(options.compressMinBytes));
  // Connections still answering when the server closes are closed once answered
  // (close-connections.ts). preClose runs just before fastify closes the listener.
  app.addHook("preClose", (done) => {
    closing = true;
    closeConnectionsOnceIdle(app.server);
    done();
  });
  const routeMethods = learnRouteMethods(app as unknown as FastifyInstance);
  app.setNotFoundHandler((request, reply) =>
    options.answerUnrouted(request, reply, routeMethods.allowed(request.url)),
  );
  documentRoutes(app, options.openapi);
  return app;
}
