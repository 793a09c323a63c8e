import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { request } from "node:https";
import { after, before, describe, test } from "node:test";
import { credentials } from "@grpc/grpc-js";
import { parseCommandLine } from "../../src/cli/options.ts";
import { securityOptions, type TlsOptions } from "../../src/config/security-options.ts";
import { identityModel } from "../../tools/onnx/test-models.ts";
import { TestClient } from "../grpc/support/grpc-harness.ts";
import { startTestServer, type TestServer } from "../support/test-server.ts";

// TLS on both ports: HTTPS (every HTTP port) and gRPC, each with an optional client
// certificate requirement (mutual TLS), from Triton's --grpc-use-ssl* flags and their
// --http-use-ssl* twins. Certificates: test/fixtures/tls.

const fixture = (name: string) => readFileSync(new URL(`../fixtures/tls/${name}`, import.meta.url));
const CA = fixture("ca.pem");
const CLIENT = { cert: fixture("client.pem"), key: fixture("client-key.pem") };
const STRANGER = { cert: fixture("stranger.pem"), key: fixture("stranger-key.pem") };

const tls = (mutual: boolean): TlsOptions => ({
  cert: fixture("server.pem"),
  key: fixture("server-key.pem"),
  rootCert: CA,
  mutual,
});

interface HttpsOptions {
  readonly ca?: Buffer;
  readonly cert?: Buffer;
  readonly key?: Buffer;
}

/** The status of an HTTPS GET, or the TLS error that refused it. */
function httpsStatus(port: number, path: string, options: HttpsOptions): Promise<number | string> {
  return new Promise((resolve) => {
    const call = request({ host: "localhost", port, path, method: "GET", ...options }, (response) => {
      response.resume();
      resolve(response.statusCode ?? 0);
    });
    call.on("error", (error: NodeJS.ErrnoException) => resolve(error.code ?? error.message));
    call.end();
  });
}

const grpcLive = (client: TestClient) =>
  client.unary("ServerLive").then(
    () => "ok",
    (error: { code: number }) => error.code,
  );

const models = { floats: { onnx: identityModel("FP32", [-1, 4]) } };

describe("TLS", () => {
  let server: TestServer;
  before(async () => {
    server = await startTestServer(models, {
      security: securityOptions({ httpTls: tls(false), grpcTls: tls(false) }),
    });
  });
  after(() => server.stop());

  test("HTTPS on the HTTP and metrics ports; plain HTTP is refused", async () => {
    assert.equal(await httpsStatus(server.server.httpPort!, "/v2/health/ready", { ca: CA }), 200);
    assert.equal(await httpsStatus(server.server.metricsPort!, "/metrics", { ca: CA }), 200);
    assert.equal(
      await httpsStatus(server.server.httpPort!, "/v2/health/ready", {}),
      "SELF_SIGNED_CERT_IN_CHAIN",
    );
    await assert.rejects(fetch(`http://127.0.0.1:${server.server.httpPort}/v2/health/ready`));
  });

  test("gRPC over TLS; a plaintext client is refused", async () => {
    const secure = new TestClient(server.grpcPort, {}, credentials.createSsl(CA));
    const plain = new TestClient(server.grpcPort);
    try {
      assert.equal(await grpcLive(secure), "ok");
      assert.equal(await grpcLive(plain), 14);
    } finally {
      secure.close();
      plain.close();
    }
  });
});

describe("mutual TLS", () => {
  let server: TestServer;
  before(async () => {
    server = await startTestServer(models, {
      security: securityOptions({ httpTls: tls(true), grpcTls: tls(true) }),
    });
  });
  after(() => server.stop());

  test("HTTPS needs a client certificate signed by the root certificate", async () => {
    const port = server.server.httpPort!;
    assert.equal(await httpsStatus(port, "/v2/health/ready", { ca: CA, ...CLIENT }), 200);
    assert.notEqual(await httpsStatus(port, "/v2/health/ready", { ca: CA }), 200);
    assert.notEqual(await httpsStatus(port, "/v2/health/ready", { ca: CA, ...STRANGER }), 200);
  });

  test("gRPC needs a client certificate signed by the root certificate", async () => {
    const clients = [
      new TestClient(server.grpcPort, {}, credentials.createSsl(CA, CLIENT.key, CLIENT.cert)),
      new TestClient(server.grpcPort, {}, credentials.createSsl(CA)),
      new TestClient(server.grpcPort, {}, credentials.createSsl(CA, STRANGER.key, STRANGER.cert)),
    ];
    try {
      assert.deepEqual(await Promise.all(clients.map(grpcLive)), ["ok", 14, 14]);
    } finally {
      for (const client of clients) client.close();
    }
  });
});

test("the flags: Triton's --grpc-use-ssl* spellings and --http-use-ssl*", () => {
  const dir = new URL("../fixtures/tls/", import.meta.url).pathname;
  const command = parseCommandLine([
    "--model-repository",
    dir,
    "--grpc-use-ssl-mutual",
    "--grpc-server-cert",
    `${dir}server.pem`,
    "--grpc-server-key",
    `${dir}server-key.pem`,
    "--grpc-root-cert",
    `${dir}ca.pem`,
    "--http-use-ssl",
    "--http-server-cert",
    `${dir}server.pem`,
    "--http-server-key",
    `${dir}server-key.pem`,
  ]);
  assert.equal(command.kind, "serve");
  if (command.kind !== "serve") return;
  assert.equal(command.options.security?.grpcTls?.mutual, true);
  assert.equal(command.options.security?.httpTls?.mutual, false);
  assert.throws(
    () => parseCommandLine(["--model-repository", dir, "--http-use-ssl"]),
    /--http-use-ssl needs --http-server-cert and --http-server-key/,
  );
});
