import {
  createServer as createHttpServer,
  type IncomingMessage,
  type Server,
  type ServerResponse,
} from "node:http";
import { createServer as createHttpsServer } from "node:https";
import type { AddressInfo } from "node:net";
import type { Registry } from "prom-client";
import type { TlsOptions } from "../config/security-options.ts";
import type { Refusals } from "../core/refusals.ts";
import { closeConnectionsOnceIdle } from "../frontends/common/http/close-connections.ts";
import { FirstRequestTimeout } from "../frontends/common/http/first-request-timeout.ts";

// The metrics endpoint on its own port (Triton's --metrics-port), so scraping never
// competes with inference traffic for the inference ports' connection limits. It serves
// HTTPS when the HTTP ports do, and answers only callers its access check lets through.

export interface MetricsServer {
  readonly port: number;
  close(): Promise<void>;
}

/** Whether a request may read the metrics; throws an error with `status` and `message` when not. */
type MetricsAccess = (header: (name: string) => string | undefined) => void;

export interface MetricsServerOptions {
  readonly tls?: TlsOptions | undefined;
  readonly access?: MetricsAccess | undefined;
  readonly maxConnections?: number | undefined;
  /** How long a connection may take to begin its first request, and to send a request's headers. */
  readonly headerTimeoutMs?: number | undefined;
  readonly refusals?: Refusals | undefined;
}

const STATUS_OF: Readonly<Record<string, number>> = { UNAUTHENTICATED: 401, PERMISSION_DENIED: 403 };

function answerError(response: ServerResponse, status: number, message: string): void {
  const headers: Record<string, string> = { "content-type": "application/json" };
  if (status === 401) headers["www-authenticate"] = 'Bearer realm="seqserve"';
  response.writeHead(status, headers).end(JSON.stringify({ error: message }));
}

export async function startMetricsServer(
  registry: Registry,
  host: string,
  port: number,
  options: MetricsServerOptions = {},
): Promise<MetricsServer> {
  let firstRequest: FirstRequestTimeout | undefined;
  const handle = (request: IncomingMessage, response: ServerResponse): void => {
    firstRequest?.begun(request.socket);
    const path = (request.url ?? "/").split("?")[0];
    if (request.method !== "GET" || path !== "/metrics") {
      answerError(response, 404, "not found: the metrics are at GET /metrics");
      return;
    }
    try {
      options.access?.((name) => {
        const value = request.headers[name];
        return Array.isArray(value) ? value.join(",") : value;
      });
    } catch (error) {
      const code = (error as { code?: string }).code ?? "";
      answerError(response, STATUS_OF[code] ?? 403, (error as Error).message);
      return;
    }
    registry.metrics().then(
      (text) => response.writeHead(200, { "content-type": registry.contentType }).end(text),
      () => answerError(response, 500, "the metrics could not be collected (the server log has the details)"),
    );
  };
  const tls = options.tls;
  const server: Server =
    tls === undefined
      ? createHttpServer(handle)
      : createHttpsServer(
          {
            cert: tls.cert,
            key: tls.key,
            ...(tls.rootCert === undefined ? {} : { ca: tls.rootCert }),
            ...(tls.mutual ? { requestCert: true, rejectUnauthorized: true } : {}),
          },
          handle,
        );
  if (options.headerTimeoutMs !== undefined) {
    server.headersTimeout = options.headerTimeoutMs;
    firstRequest = new FirstRequestTimeout(server, options.headerTimeoutMs, options.refusals);
  }
  if (options.maxConnections !== undefined) {
    server.maxConnections = options.maxConnections;
    server.on("drop", () => options.refusals?.refused("http_connections"));
  }
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(port, host, () => resolve());
  });
  return {
    port: (server.address() as AddressInfo).port,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        closeConnectionsOnceIdle(server);
      }),
  };
}
