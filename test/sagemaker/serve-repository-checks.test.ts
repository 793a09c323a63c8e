import assert from "node:assert/strict";
import { mkdirSync, writeFileSync } from "node:fs";
import { createServer, type Server } from "node:net";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { accumulatorModel } from "../../tools/onnx/sequence-models.ts";
import { type TempRepository, tempRepository } from "../support/model-repository.ts";
import { BIN, freePort, run, ServerProcess } from "../support/seqserve-process.ts";
import { accumulatorConfig } from "../support/sequence-kit.ts";
import { closeSession, invoke, jsonAnswer, newSession, sdkClient } from "./support/sagemaker-kit.ts";

// `seqserve serve` checks the model repository as Triton's SageMaker image does before it
// starts Triton (docker/sagemaker/serve), with its words, and loads only the model
// SAGEMAKER_TRITON_DEFAULT_MODEL_NAME names, as the image's --load-model does.

const accumulator = { config: accumulatorConfig("accumulator", 4, "direct { }"), onnx: accumulatorModel() };

describe("seqserve serve: the model repository's checks", { timeout: 120_000 }, () => {
  const repositories: TempRepository[] = [];
  const repository = (models: Parameters<typeof tempRepository>[0] = {}): TempRepository => {
    const made = tempRepository(models);
    repositories.push(made);
    return made;
  };
  // A start the checks let through fails at once on this port, which another socket
  // holds, rather than serving until the test gives up on it.
  let busy: Server;
  let busyEnv: Record<string, string>;
  before(async () => {
    busy = createServer();
    await new Promise<void>((resolve) => busy.listen(0, "127.0.0.1", resolve));
    busyEnv = { SAGEMAKER_BIND_TO_PORT: String((busy.address() as { port: number }).port) };
  });
  after(() => {
    busy?.close();
    for (const made of repositories) made.remove();
  });

  it("a SAGEMAKER_TRITON_DEFAULT_MODEL_NAME with no folder in the repository stops the start", async () => {
    const exit = await run(
      ["serve", "--model-repository", repository({ accumulator }).path, "--host", "127.0.0.1"],
      {
        ...busyEnv,
        SAGEMAKER_TRITON_DEFAULT_MODEL_NAME: "missing",
      },
    );
    assert.equal(exit.code, 2);
    assert.match(
      exit.stderr,
      /^seqserve: Directory with provided SAGEMAKER_TRITON_DEFAULT_MODEL_NAME missing does not exist$/m,
    );
  });

  it("a repository without a model stops the start", async () => {
    const exit = await run(
      ["serve", "--model-repository", repository().path, "--host", "127.0.0.1"],
      busyEnv,
    );
    assert.equal(exit.code, 2);
    assert.match(exit.stderr, /^seqserve: No model found in model repository$/m);
  });

  it("a model's own files at the repository's top stop the start", async () => {
    const made = repository();
    writeFileSync(join(made.path, "config.pbtxt"), accumulator.config);
    mkdirSync(join(made.path, "1"));
    const exit = await run(["serve", "--model-repository", made.path, "--host", "127.0.0.1"], busyEnv);
    assert.equal(exit.code, 2);
    assert.match(exit.stderr, /^seqserve: Incorrect directory structure in '.*': model directory needs/m);
  });

  it("SAGEMAKER_TRITON_DEFAULT_MODEL_NAME loads that model alone: a folder beside it that is no model does not stop the start", async () => {
    const made = repository({ accumulator });
    mkdirSync(join(made.path, "notes"));
    writeFileSync(join(made.path, "notes", "config.pbtxt"), "these are notes, not a model config");
    const port = await freePort();
    const server = new ServerProcess(
      process.execPath,
      [BIN, "serve", "--model-repository", made.path, "--host", "127.0.0.1", "--log-format", "json"],
      { SAGEMAKER_BIND_TO_PORT: String(port), SAGEMAKER_TRITON_DEFAULT_MODEL_NAME: "accumulator" },
    );
    const client = sdkClient(port);
    try {
      await server.listening;
      assert.equal((await fetch(`http://127.0.0.1:${port}/ping`)).status, 200);
      // The default model takes the invocations that name none.
      const opened = await invoke(client, { body: "[5]", sessionId: "NEW_SESSION" });
      assert.deepEqual(jsonAnswer(opened), [[5]]);
      const session = newSession(opened).id;
      assert.deepEqual(jsonAnswer(await invoke(client, { body: "[2]", sessionId: session })), [[7]]);
      await closeSession(client, session);
    } finally {
      client.destroy();
      const exit = await server.stop();
      assert.equal(exit.code, 0, exit.stderr);
    }
  });
});
