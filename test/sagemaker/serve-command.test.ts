import assert from "node:assert/strict";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { createServer } from "node:net";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { accumulatorModel } from "../../tools/onnx/sequence-models.ts";
import { type TempRepository, tempRepository } from "../support/model-repository.ts";
import { BIN, type ListeningLine, ROOT, run, ServerProcess } from "../support/seqserve-process.ts";
import { accumulatorConfig } from "../support/sequence-kit.ts";
import { closeSession, invoke, jsonAnswer, newSession, sdkClient } from "./support/sagemaker-kit.ts";

// `seqserve serve`, as a SageMaker container is started (`docker run <image> serve`):
// the SageMaker API on SAGEMAKER_BIND_TO_PORT, the other endpoints off. The image's
// models would be in /opt/ml/model; here --model-repository overrides it, as a flag may.
// No container engine runs here: the Dockerfile is checked for what the image relies on
// (it runs this command, copies files that exist, needs no dev dependency at run time).

/** A port nobody listens on now. */
function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const probe = createServer();
    probe.once("error", reject);
    probe.listen(0, "127.0.0.1", () => {
      const address = probe.address();
      probe.close(() => resolve(typeof address === "object" && address !== null ? address.port : 0));
    });
  });
}

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

/** Every TypeScript file under `dir`. */
function sourceFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) =>
    entry.isDirectory()
      ? sourceFiles(join(dir, entry.name))
      : entry.name.endsWith(".ts")
        ? [join(dir, entry.name)]
        : [],
  );
}

describe("the Dockerfile", () => {
  const dockerfile = readFileSync(join(ROOT, "Dockerfile"), "utf8");
  const instructions = dockerfile
    .split("\n")
    .filter((line) => line.trim() !== "" && !line.startsWith("#"))
    .map((line) => line.trim());

  it("runs `seqserve serve` from its working directory, on port 8080", () => {
    const json = (name: string) =>
      JSON.parse(instructions.find((i) => i.startsWith(`${name} `))!.slice(name.length + 1));
    assert.ok(instructions.includes("WORKDIR /opt/seqserve"));
    assert.deepEqual(
      [...json("ENTRYPOINT"), ...json("CMD")],
      ["node", "/opt/seqserve/bin/seqserve.js", "serve"],
    );
    assert.ok(instructions.includes("EXPOSE 8080"));
  });

  it("copies files that exist, and installs production dependencies only", () => {
    const copies = instructions.filter((i) => i.startsWith("COPY "));
    assert.ok(copies.length > 0);
    for (const copy of copies) {
      for (const source of copy.split(/\s+/).slice(1, -1))
        assert.ok(existsSync(join(ROOT, source)), `${source} exists`);
    }
    assert.ok(instructions.includes("RUN npm ci --omit=dev && npm cache clean --force"));
  });

  it("what the server imports at run time is in package.json's dependencies", () => {
    const { dependencies } = JSON.parse(readFileSync(join(ROOT, "package.json"), "utf8")) as {
      dependencies: Record<string, string>;
    };
    const files = [...sourceFiles(join(ROOT, "src")), join(ROOT, BIN)];
    const seen = new Set<string>();
    for (const file of files) {
      // Type-only imports vanish at run time.
      for (const match of readFileSync(file, "utf8").matchAll(
        /^import (?!type )[^;]*? from "([^."][^"]*)";/gm,
      )) {
        const specifier = match[1]!;
        if (specifier.startsWith("node:")) continue;
        const name = specifier.startsWith("@")
          ? specifier.split("/").slice(0, 2).join("/")
          : specifier.split("/")[0]!;
        assert.ok(name in dependencies, `${file} imports '${specifier}', which is not a runtime dependency`);
        seen.add(name);
      }
    }
    for (const name of ["fastify", "onnxruntime-node", "tsx"])
      assert.ok(seen.has(name), `${name} is imported`);
  });
});
