import { request as httpRequest, type IncomingHttpHeaders, type OutgoingHttpHeaders } from "node:http";
import type { AddressInfo } from "node:net";
import { createHttpFrontend, type HttpFrontend } from "../../../src/frontends/http/http-frontend.ts";
import { silentLogger } from "../../../src/observability/logger.ts";
import { parseTritonJson } from "../../support/triton-json.ts";
import { type FakeServer, fakeServer } from "./fake-context.ts";

// The real HTTP frontend on an ephemeral loopback port, over the fake context, and small
// clients to talk to it.

export interface TestServer {
  readonly url: string;
  readonly port: number;
  readonly fake: FakeServer;
  readonly app: HttpFrontend;
  close(): Promise<void>;
}

export async function startServer(
  options: { bodyLimitBytes?: number; streamMaxHeldRequestBytes?: number } = {},
): Promise<TestServer> {
  const fake = fakeServer();
  const app = createHttpFrontend({
    context: fake.context,
    logger: silentLogger(),
    bodyLimitBytes: options.bodyLimitBytes ?? 8 * 1024 * 1024,
    ...(options.streamMaxHeldRequestBytes === undefined
      ? {}
      : { streamMaxHeldRequestBytes: options.streamMaxHeldRequestBytes }),
  });
  await app.listen({ port: 0, host: "127.0.0.1" });
  const { port } = app.server.address() as AddressInfo;
  return { url: `http://127.0.0.1:${port}`, port, fake, app, close: () => app.close() };
}

export interface RawResponse {
  readonly status: number;
  readonly headers: IncomingHttpHeaders;
  readonly body: Buffer;
}

/** One request with node:http, so headers and body bytes are exactly as given. */
export function send(
  server: Pick<TestServer, "port">,
  method: string,
  path: string,
  body?: Uint8Array | string,
  headers: OutgoingHttpHeaders = {},
): Promise<RawResponse> {
  return new Promise((resolve, reject) => {
    const request = httpRequest(
      { host: "127.0.0.1", port: server.port, method, path, headers, agent: false },
      (response) => {
        const chunks: Buffer[] = [];
        response.on("data", (chunk: Buffer) => chunks.push(chunk));
        response.on("end", () =>
          resolve({
            status: response.statusCode ?? 0,
            headers: response.headers,
            body: Buffer.concat(chunks),
          }),
        );
        response.on("error", reject);
      },
    );
    request.on("error", reject);
    request.end(body);
  });
}

export function bodyJson(response: RawResponse): unknown {
  return JSON.parse(response.body.toString("utf8"));
}

/** POSTs a JSON value to `path` with fetch and returns status and parsed body. */
export async function postJson(
  server: TestServer,
  path: string,
  value: unknown,
): Promise<{ status: number; headers: Headers; json: Record<string, unknown> }> {
  const response = await fetch(`${server.url}${path}`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: typeof value === "string" ? value : JSON.stringify(value),
  });
  return {
    status: response.status,
    headers: response.headers,
    json: parseTritonJson(await response.text()) as Record<string, unknown>,
  };
}

/** A binary-extension body: the JSON header, then each part's bytes. */
export function binaryRequest(
  header: unknown,
  parts: readonly Uint8Array[],
): { body: Buffer; headerLength: number } {
  const json = Buffer.from(JSON.stringify(header));
  return {
    body: Buffer.concat([json, ...parts.map((p) => Buffer.from(p.buffer, p.byteOffset, p.byteLength))]),
    headerLength: json.byteLength,
  };
}

/** Splits a binary-extension response into its JSON header and the bytes after it. */
export function splitBinaryResponse(response: RawResponse): {
  json: Record<string, unknown>;
  binary: Buffer;
} {
  const length = Number(response.headers["inference-header-content-length"]);
  return {
    json: parseTritonJson(response.body.subarray(0, length).toString("utf8")) as Record<string, unknown>,
    binary: response.body.subarray(length),
  };
}
