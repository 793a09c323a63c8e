import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import { after, before, describe, it } from "node:test";
import { accumulatorModel } from "../../tools/onnx/sequence-models.ts";
import { type TempRepository, tempRepository } from "../support/model-repository.ts";
import { BIN, freePort, type ListeningLine, run, ServerProcess } from "../support/seqserve-process.ts";
import { accumulatorConfig } from "../support/sequence-kit.ts";
import { closeSession, invoke, jsonAnswer, newSession, sdkClient } from "./support/sagemaker-kit.ts";

// `seqserve serve`, as a SageMaker container is started (`docker run <image> serve`):
// the SageMaker API on SAGEMAKER_BIND_TO_PORT, the other endpoints off. The image's
// models would be in /opt/ml/model; here --model-repository overrides it, as a flag may.
// The image built from the Dockerfile starts this same command (test/container).

describe("seqserve serve", { timeout: 120_000 }, () => {
  let repository: TempRepository;
  let server: ServerProcess;
  let port: number;
  let listening: ListeningLine;
  before(async () => {
    repository = tempRepository({
      accumulator: { config: accumulatorConfig("accumulator", 4, "direct { }"), onnx: accumulatorModel() },
    });
    port = await freePort();
    server = new ServerProcess(
      process.execPath,
      [BIN, "serve", "--model-repository", repository.path, "--host", "127.0.0.1", "--log-format", "json"],
      { SAGEMAKER_BIND_TO_PORT: String(port), SAGEMAKER_SESSIONS_EXPIRATION: "30" },
    );
    listening = await server.listening;
  });
  after(async () => {
    await server?.stop();
    repository?.remove();
  });

  it("listens on SAGEMAKER_BIND_TO_PORT with only the SageMaker API", () => {
    assert.equal(listening.sagemaker_port, port);
    assert.deepEqual([listening.http_port, listening.grpc_port, listening.metrics_port], [null, null, null]);
  });

  it("serves /ping and a session through the AWS SDK, with SAGEMAKER_SESSIONS_EXPIRATION as the TTL", async () => {
    assert.equal((await fetch(`http://127.0.0.1:${port}/ping`)).status, 200);
    const client = sdkClient(port);
    try {
      const before = Date.now();
      const opened = await invoke(client, { body: "[5]", sessionId: "NEW_SESSION" });
      const session = newSession(opened);
      assert.ok(session.expiresAtMs >= before + 30_000 && session.expiresAtMs <= Date.now() + 31_000);
      assert.deepEqual(jsonAnswer(opened), [[5]]);
      assert.deepEqual(jsonAnswer(await invoke(client, { body: "[3]", sessionId: session.id })), [[8]]);
      assert.equal((await closeSession(client, session.id)).ClosedSessionId, session.id);
    } finally {
      client.destroy();
    }
  });

  it("stops cleanly on SIGTERM", async () => {
    const exit = await server.stop();
    assert.equal(exit.code, 0, exit.stderr);
  });
});

describe("seqserve serve: usage errors", { timeout: 120_000 }, () => {
  it("a SAGEMAKER_BIND_TO_PORT that is not a port", async () => {
    const exit = await run(["serve", "--model-repository", "examples/models"], {
      SAGEMAKER_BIND_TO_PORT: "eighty",
    });
    assert.equal(exit.code, 2);
    assert.match(
      exit.stderr,
      /^seqserve: SAGEMAKER_BIND_TO_PORT must be a whole number up to 65535, got 'eighty'$/m,
    );
  });

  it("models are looked for in /opt/ml/model when no repository is given", {
    skip: existsSync("/opt/ml/model"),
  }, async () => {
    const exit = await run(["serve"]);
    assert.equal(exit.code, 2);
    assert.match(exit.stderr, /^seqserve: model repository '\/opt\/ml\/model' does not exist$/m);
  });
});
