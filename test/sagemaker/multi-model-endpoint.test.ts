import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import type { SageMakerRuntimeClient } from "@aws-sdk/client-sagemaker-runtime";
import { accumulatorModel } from "../../tools/onnx/sequence-models.ts";
import { BIN, freePort, ServerProcess } from "../support/seqserve-process.ts";
import { accumulatorConfig, waitFor } from "../support/sequence-kit.ts";
import {
  containerMessage,
  jsonAnswer,
  newSession,
  sdkClient,
  sdkError,
  invoke as sdkInvoke,
} from "./support/sagemaker-kit.ts";

// SageMaker's multi-model endpoint, as Triton's SageMaker server serves it: `serve` with
// SAGEMAKER_MULTI_MODEL=true starts with no model (explicit model control), and SageMaker
// loads, lists, invokes and unloads models through /models. SageMaker itself calls these
// routes (not the SDK), so the test calls them with fetch, with the headers SageMaker
// sends; callers invoke a model with the AWS SDK's InvokeEndpoint and its TargetModel.

/** A model folder as SageMaker unpacks an artifact: `<url>/<model>/config.pbtxt`, or config.pbtxt at `<url>`. */
function writeModel(dir: string, config: string, files: Record<string, Uint8Array | string>): void {
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, "config.pbtxt"), config);
  for (const [file, content] of Object.entries(files)) {
    mkdirSync(join(dir, file, ".."), { recursive: true });
    writeFileSync(join(dir, file), content);
  }
}

const OUT_OF_MEMORY_HANDLER = `
export default {
  initialize() {
    throw new Error("CUDA out of memory: tried to allocate 2.00 GiB");
  },
  execute() {},
};
`;

// Model code that runs out of memory as it runs.
const OUT_OF_MEMORY_RUN = `
export default {
  execute() {
    throw new Error("CUDA out of memory: tried to allocate 2.00 GiB");
  },
};
`;

describe("SageMaker multi-model endpoint", { timeout: 120_000 }, () => {
  let root: string;
  let server: ServerProcess;
  let base: string;
  let client: SageMakerRuntimeClient;
  /** SageMaker's headers: the artifact's name (TargetModel), when the test gives one. */
  const sageMakerHeaders = (targetModel: string | undefined): Record<string, string> =>
    targetModel === undefined ? {} : { "x-amzn-sagemaker-target-model": targetModel };
  const load = (model_name: string, url: string, targetModel?: string) =>
    fetch(`${base}/models`, {
      method: "POST",
      headers: { "content-type": "application/json", ...sageMakerHeaders(targetModel) },
      body: JSON.stringify({ model_name, url }),
    });
  const invoke = (name: string, body: string, session?: string, targetModel?: string) =>
    fetch(`${base}/models/${name}/invoke`, {
      method: "POST",
      headers: {
        "content-type": "application/json",
        ...sageMakerHeaders(targetModel),
        ...(session === undefined ? {} : { "x-amzn-sagemaker-session-id": session }),
      },
      body,
    });
  const unload = (name: string, targetModel?: string) =>
    fetch(`${base}/models/${name}`, { method: "DELETE", headers: sageMakerHeaders(targetModel) });

  before(async () => {
    root = mkdtempSync(join(tmpdir(), "seqserve-mme-"));
    const onnx = accumulatorModel();
    // As SageMaker unpacks an artifact: /opt/ml/models/<hash>/model/<model folder>.
    writeModel(
      join(root, "a1b2", "model", "accumulator"),
      accumulatorConfig("accumulator", 4, "direct { }"),
      {
        "1/model.onnx": onnx,
      },
    );
    // config.pbtxt at the url itself.
    writeModel(join(root, "c3d4", "model"), accumulatorConfig("model", 4, "direct { }"), {
      "1/model.onnx": onnx,
    });
    writeModel(join(root, "broken", "model", "notes"), "these are notes, not a model config", {});
    writeModel(
      join(root, "oom", "model", "big"),
      'backend: "typescript"\nmax_batch_size: 0\ninput [ { name: "X" data_type: TYPE_INT32 dims: [ 1 ] } ]\noutput [ { name: "Y" data_type: TYPE_INT32 dims: [ 1 ] } ]',
      {
        "1/model.ts": OUT_OF_MEMORY_HANDLER,
      },
    );
    writeModel(
      join(root, "oom-run", "model", "big"),
      'backend: "typescript"\nmax_batch_size: 0\ninput [ { name: "X" data_type: TYPE_INT32 dims: [ 1 ] } ]\noutput [ { name: "Y" data_type: TYPE_INT32 dims: [ 1 ] } ]',
      { "1/model.ts": OUT_OF_MEMORY_RUN },
    );
    mkdirSync(join(root, "repository"));
    // The endpoint's own model, which the API may not replace.
    writeModel(join(root, "repository", "own"), accumulatorConfig("own", 4, "direct { }"), {
      "1/model.onnx": onnx,
    });
    const port = await freePort();
    server = new ServerProcess(
      process.execPath,
      [
        BIN,
        "serve",
        "--model-repository",
        join(root, "repository"),
        "--host",
        "127.0.0.1",
        "--log-format",
        "json",
      ],
      { SAGEMAKER_BIND_TO_PORT: String(port), SAGEMAKER_MULTI_MODEL: "true" },
    );
    await server.listening;
    base = `http://127.0.0.1:${port}`;
    client = sdkClient(port);
  });
  after(async () => {
    client?.destroy();
    await server?.stop();
    rmSync(root, { recursive: true, force: true });
  });

  it("starts with no model loaded, and /ping answers", async () => {
    assert.equal((await fetch(`${base}/ping`)).status, 200);
    const list = await fetch(`${base}/models`);
    assert.equal(list.status, 200);
    assert.deepEqual(await list.json(), { models: [] });
  });

  it("POST /models loads the model folder in url under model_name; GET lists it with its url", async () => {
    const url = join(root, "a1b2", "model");
    const loaded = await load("a1b2", url);
    assert.equal(loaded.status, 200, await loaded.clone().text());
    assert.equal(await loaded.text(), "");
    assert.deepEqual(await (await fetch(`${base}/models`)).json(), {
      models: [{ modelName: "a1b2", modelUrl: url }],
    });
    const one = await fetch(`${base}/models/a1b2`);
    assert.equal(one.status, 200);
    assert.deepEqual(await one.json(), { modelName: "a1b2", modelUrl: url });
  });

  it("a url holding config.pbtxt is the model folder itself; its modelUrl is the url's parent, as Triton's", async () => {
    const loaded = await load("c3d4", join(root, "c3d4", "model"));
    assert.equal(loaded.status, 200, await loaded.clone().text());
    // Triton registers /opt/ml/models/<hash> as the repository of its folder "model", and answers it.
    assert.deepEqual(await (await fetch(`${base}/models/c3d4`)).json(), {
      modelName: "c3d4",
      modelUrl: join(root, "c3d4"),
    });
    assert.deepEqual(
      await (
        await invoke(
          "c3d4",
          '{"inputs":[{"name":"INPUT","datatype":"INT32","shape":[1,1],"data":[4]}],"parameters":{"sequence_id":9,"sequence_start":true,"sequence_end":true}}',
        )
      )
        .json()
        .then((b) => (b as { outputs: { data: number[] }[] }).outputs[0]!.data),
      [4],
    );
  });

  it("POST /models/{name}/invoke is an invocation of that model, sessions included", async () => {
    const opened = await invoke("a1b2", "[5]", "NEW_SESSION");
    assert.equal(opened.status, 200, await opened.clone().text());
    assert.deepEqual(await opened.json(), [[5]]);
    const session = opened.headers.get("x-amzn-sagemaker-new-session-id")!.split(";")[0]!;
    const step = await invoke("a1b2", "[3]", session);
    assert.deepEqual(await step.json(), [[8]]);
    const closed = await invoke("a1b2", '{"requestType":"CLOSE"}', session);
    assert.equal(closed.headers.get("x-amzn-sagemaker-closed-session-id"), session);
  });

  it("a name loaded already gets 409", async () => {
    const again = await load("a1b2", join(root, "c3d4", "model"));
    assert.equal(again.status, 409);
    assert.match(((await again.json()) as { error: string }).error, /'a1b2'.*loaded already/);
  });

  it("a name of the endpoint's own repository gets 409: the API does not replace it", async () => {
    const own = await load("own", join(root, "c3d4", "model"));
    assert.equal(own.status, 409);
    assert.match(
      ((await own.json()) as { error: string }).error,
      /model repository has a model of this name/,
    );
    assert.equal((await fetch(`${base}/models/own`, { method: "DELETE" })).status, 404);
  });

  it("a folder that is no model gets 400 with the error, and is not listed", async () => {
    const failed = await load("broken", join(root, "broken", "model"));
    assert.equal(failed.status, 400);
    assert.ok(((await failed.json()) as { error: string }).error.length > 0);
    assert.equal((await fetch(`${base}/models/broken`)).status, 404);
  });

  it("a load that runs out of memory gets 507, so SageMaker unloads others and tries again", async () => {
    const failed = await load("oom", join(root, "oom", "model"));
    assert.equal(failed.status, 507);
    assert.match(((await failed.json()) as { error: string }).error, /out of memory/);
  });

  it("an invocation that runs out of memory gets 507 too", async () => {
    assert.equal((await load("oom-run", join(root, "oom-run", "model"))).status, 200);
    const failed = await invoke(
      "oom-run",
      '{"inputs":[{"name":"X","datatype":"INT32","shape":[1],"data":[1]}]}',
    );
    assert.equal(failed.status, 507, await failed.clone().text());
    assert.equal(failed.headers.get("content-type"), "application/json");
    assert.match(((await failed.json()) as { error: string }).error, /out of memory/);
    assert.equal((await fetch(`${base}/models/oom-run`, { method: "DELETE" })).status, 200);
  });

  it("a url under /proc, /dev or /sys is refused with 400", async () => {
    assert.equal((await load("proc", "/proc/self/../1")).status, 400);
  });

  it("DELETE /models/{name} unloads it: then it is not found, nor invoked", async () => {
    const deleted = await fetch(`${base}/models/a1b2`, { method: "DELETE" });
    assert.equal(deleted.status, 200);
    assert.equal((await fetch(`${base}/models/a1b2`)).status, 404);
    assert.equal((await invoke("a1b2", "[1]")).status, 404);
    assert.equal((await fetch(`${base}/models/a1b2`, { method: "DELETE" })).status, 404);
    assert.deepEqual(await (await fetch(`${base}/models`)).json(), {
      models: [{ modelName: "c3d4", modelUrl: join(root, "c3d4") }],
    });
    // The name can be loaded again.
    assert.equal((await load("a1b2", join(root, "a1b2", "model"))).status, 200);
  });

  it("a step of a session whose model DELETE unloaded is told so (400, as for a session ended otherwise), before and after the model is loaded again", async () => {
    const url = join(root, "a1b2", "model");
    assert.equal((await load("e5f6", url)).status, 200);
    const opened = await invoke("e5f6", "[2]", "NEW_SESSION");
    assert.equal(opened.status, 200, await opened.clone().text());
    const session = opened.headers.get("x-amzn-sagemaker-new-session-id")!.split(";")[0]!;
    assert.equal((await fetch(`${base}/models/e5f6`, { method: "DELETE" })).status, 200);
    const told = new RegExp(
      `^session '${session}' ended at \\S+: its model 'e5f6' version 1 was unloaded; open a new session with NEW_SESSION$`,
    );
    // On /invocations, which names no model: the session would say which.
    const stepped = await fetch(`${base}/invocations`, {
      method: "POST",
      headers: { "content-type": "application/json", "x-amzn-sagemaker-session-id": session },
      body: "[1]",
    });
    assert.equal(stepped.status, 400);
    assert.match(((await stepped.json()) as { error: string }).error, told);
    // SageMaker loads the model again for its next invocation: the new load has no session of the old.
    assert.equal((await load("e5f6", url)).status, 200);
    const again = await invoke("e5f6", "[1]", session);
    assert.equal(again.status, 400);
    assert.match(((await again.json()) as { error: string }).error, told);
  });

  describe("a model loaded with a TargetModel, as SageMaker loads it", () => {
    // SageMaker calls the model by its hash (model_name), and names the artifact in
    // X-Amzn-SageMaker-Target-Model: Triton serves the model under that name.
    const HASH = "9f8e";
    const TARGET = "acc.tar.gz";
    let url: string;
    let session: string;
    before(() => {
      url = join(root, "a1b2", "model");
    });
    /** The server's log line of `event` for the model served as TargetModel (stdout may trail the answer). */
    const logged = (event: string) =>
      waitFor(`the ${event} log line of '${TARGET}'`, async () =>
        server.lines.find((line) => line.event === event && line.model === TARGET),
      );

    it("is served under its TargetModel; the /models routes call it by its hash", async () => {
      const loaded = await load(HASH, url, TARGET);
      assert.equal(loaded.status, 200, await loaded.clone().text());
      assert.deepEqual(await (await fetch(`${base}/models/${HASH}`)).json(), {
        modelName: HASH,
        modelUrl: url,
      });
      const listed = (await (await fetch(`${base}/models`)).json()) as { models: { modelName: string }[] };
      assert.deepEqual(
        listed.models.find((m) => m.modelName === HASH),
        { modelName: HASH, modelUrl: url },
      );
      assert.equal((await fetch(`${base}/models/${TARGET}`)).status, 404);
      await logged("model_loaded");
      const answered = await invoke(
        HASH,
        '{"inputs":[{"name":"INPUT","datatype":"INT32","shape":[1,1],"data":[7]}],"parameters":{"sequence_id":11,"sequence_start":true,"sequence_end":true}}',
        undefined,
        TARGET,
      );
      assert.equal(answered.status, 200, await answered.clone().text());
      const body = (await answered.json()) as { model_name: string; outputs: { data: number[] }[] };
      assert.equal(body.model_name, TARGET);
      assert.deepEqual(body.outputs[0]!.data, [7]);
    });

    it("InvokeEndpoint with that TargetModel reaches it, and its sessions go on through /models/{hash}/invoke", async () => {
      const opened = await sdkInvoke(client, { body: "[5]", sessionId: "NEW_SESSION", targetModel: TARGET });
      assert.deepEqual(jsonAnswer(opened), [[5]]);
      session = newSession(opened).id;
      const step = await invoke(HASH, "[3]", session, TARGET);
      assert.equal(step.status, 200, await step.clone().text());
      assert.deepEqual(await step.json(), [[8]]);
      const next = await sdkInvoke(client, { body: "[1]", sessionId: session, targetModel: TARGET });
      assert.deepEqual(jsonAnswer(next), [[9]]);
      // A session opened without a step says which model it is a sequence of.
      const empty = await sdkInvoke(client, {
        body: '{"requestType":"NEW_SESSION"}',
        sessionId: "NEW_SESSION",
        targetModel: TARGET,
      });
      assert.equal((jsonAnswer(empty) as { model_name: string }).model_name, TARGET);
    });

    it("a second load of its hash, or of its TargetModel under another hash, gets 409", async () => {
      const again = await load(HASH, url, "other.tar.gz");
      assert.equal(again.status, 409);
      assert.match(((await again.json()) as { error: string }).error, /'9f8e'.*loaded already/);
      const taken = await load("7a6b", url, TARGET);
      assert.equal(taken.status, 409);
      assert.match(
        ((await taken.json()) as { error: string }).error,
        /'7a6b' as TargetModel 'acc\.tar\.gz': a model is served under 'acc\.tar\.gz' already/,
      );
      assert.equal((await fetch(`${base}/models/7a6b`)).status, 404);
      // Nor may a TargetModel replace the endpoint's own model.
      const own = await load("5c4d", url, "own");
      assert.equal(own.status, 409);
      assert.match(
        ((await own.json()) as { error: string }).error,
        /model repository has a model of this name/,
      );
    });

    it("DELETE /models/{hash} unloads it: InvokeEndpoint no longer reaches it, and its sessions are told so once it is loaded again", async () => {
      const deleted = await unload(HASH, TARGET);
      assert.equal(deleted.status, 200, await deleted.clone().text());
      assert.equal((await fetch(`${base}/models/${HASH}`)).status, 404);
      await logged("model_unloaded");
      assert.equal((await invoke(HASH, "[1]", undefined, TARGET)).status, 404);
      const gone = containerMessage(await sdkError(sdkInvoke(client, { body: "[1]", targetModel: TARGET })));
      assert.equal(gone, "Request for unknown model: 'acc.tar.gz' is not found");
      // SageMaker loads it again for the next invocation.
      assert.equal((await load(HASH, url, TARGET)).status, 200);
      const told = new RegExp(
        `^session '${session}' ended at \\S+: its model 'acc\\.tar\\.gz' version 1 was unloaded; open a new session with NEW_SESSION$`,
      );
      const stepped = await invoke(HASH, "[1]", session, TARGET);
      assert.equal(stepped.status, 400);
      assert.match(((await stepped.json()) as { error: string }).error, told);
      const viaSdk = await sdkError(
        sdkInvoke(client, { body: "[1]", sessionId: session, targetModel: TARGET }),
      );
      assert.match(containerMessage(viaSdk), told);
    });
  });
});
