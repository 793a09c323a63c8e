import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { parseCommandLine } from "../../src/cli/options.ts";
import { UsageError } from "../../src/cli/usage-error.ts";
import { addSubModel } from "../../tools/onnx/test-models.ts";
import { send } from "../http/support/http-server.ts";
import { tempRepository } from "../support/model-repository.ts";
import { startTestServer, type TestServer } from "../support/test-server.ts";

// What GET /ping answers for, as Triton's SageMaker server reads SAGEMAKER_TRITON_PING_MODE:
// "ready" (every model ready) or "live" (the server running, whatever its models). Triton's
// image sets it: ready, live for a multi-model endpoint, SAGEMAKER_TRITON_OVERRIDE_PING_MODE
// over both.

const ADD_SUB = `
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] }, { name: "INPUT1" data_type: TYPE_INT32 dims: [ 16 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] }, { name: "OUTPUT1" data_type: TYPE_INT32 dims: [ 16 ] } ]
`;

describe("SageMaker's ping mode at start", () => {
  const pingMode = (argv: string[], env: Record<string, string>) => {
    const command = parseCommandLine(argv, env);
    assert.equal(command.kind, "serve");
    return command.kind === "serve" ? command.options.sagemakerPingMode : undefined;
  };
  const server = ["--model-repository", ".", "--allow-sagemaker", "true"];
  const serve = ["serve", "--model-repository", "."];

  it("is SAGEMAKER_TRITON_PING_MODE, else ready; --sagemaker-ping-mode wins", () => {
    assert.equal(pingMode(server, {}), "ready");
    assert.equal(pingMode(server, { SAGEMAKER_TRITON_PING_MODE: "live" }), "live");
    assert.equal(
      pingMode([...server, "--sagemaker-ping-mode", "ready"], { SAGEMAKER_TRITON_PING_MODE: "live" }),
      "ready",
    );
  });

  it("`serve` sets it as Triton's image: ready, live for a multi-model endpoint, the override over both", () => {
    assert.equal(pingMode(serve, {}), "ready");
    assert.equal(pingMode(serve, { SAGEMAKER_MULTI_MODEL: "true" }), "live");
    assert.equal(pingMode(serve, { SAGEMAKER_TRITON_OVERRIDE_PING_MODE: "live" }), "live");
    assert.equal(
      pingMode(serve, { SAGEMAKER_MULTI_MODEL: "true", SAGEMAKER_TRITON_OVERRIDE_PING_MODE: "ready" }),
      "ready",
    );
    assert.equal(pingMode([...serve, "--sagemaker-ping-mode", "live"], {}), "live");
  });

  it("another value is refused, naming where it came from", () => {
    const refused = (argv: string[], env: Record<string, string>, message: string) =>
      assert.throws(
        () => parseCommandLine(argv, env),
        (error: unknown) => error instanceof UsageError && error.message === message,
      );
    refused(
      server,
      { SAGEMAKER_TRITON_PING_MODE: "LIVE" },
      "Invalid SAGEMAKER_TRITON_PING_MODE 'LIVE'. Must be one of: ready, live",
    );
    refused(
      serve,
      { SAGEMAKER_TRITON_OVERRIDE_PING_MODE: "healthy" },
      "Invalid SAGEMAKER_TRITON_OVERRIDE_PING_MODE 'healthy'. Must be one of: ready, live",
    );
    refused(
      [...server, "--sagemaker-ping-mode", "up"],
      {},
      "Invalid --sagemaker-ping-mode 'up'. Must be one of: ready, live",
    );
  });
});

describe("GET /ping beside a model that failed to load", { timeout: 60_000 }, () => {
  const repository = tempRepository({
    corrupt: { onnx: new TextEncoder().encode("this is not an ONNX model") },
    fine: { config: ADD_SUB, onnx: addSubModel("INT32", [-1, 16]) },
  });
  let ready: TestServer;
  let live: TestServer;
  before(async () => {
    ready = await startTestServer(repository.path, { exitOnError: false, sagemakerPort: 0 });
    live = await startTestServer(repository.path, {
      exitOnError: false,
      sagemakerPort: 0,
      sagemakerPingMode: "live",
    });
  });
  after(async () => {
    await ready?.stop();
    await live?.stop();
    repository.remove();
  });

  it("ready: 503, naming the model that is not ready", async () => {
    const ping = await send({ port: ready.server.sagemakerPort! }, "GET", "/ping");
    assert.equal(ping.status, 503);
    assert.match(JSON.parse(ping.body.toString()).error, /corrupt/);
  });

  it("live: 200, the server runs", async () => {
    const ping = await send({ port: live.server.sagemakerPort! }, "GET", "/ping");
    assert.equal(ping.status, 200);
    assert.equal(ping.body.byteLength, 0);
  });
});
