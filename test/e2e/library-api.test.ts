import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import {
  type CliCommand,
  parseCommandLine,
  type RunningServer,
  SEQSERVE_VERSION,
  type ServerOptionsInput,
  startServer,
} from "../../src/index.ts";
import { addSubModel } from "../../tools/onnx/test-models.ts";
import { getJson, infer, outputData } from "../support/http-client.ts";
import { type TempRepository, tempRepository } from "../support/model-repository.ts";
import { rowsOf, simpleConfig, simpleInputs, sum } from "./support/serving.ts";

// seqserve embedded in a program, through the package entry (src/index.ts): startServer
// takes the command line's options, each optional, checked; stop() ends it. The packed
// package's own entry is exercised in test/package.

describe("the library entry", () => {
  let repository: TempRepository;
  before(() => {
    repository = tempRepository({
      simple: { config: simpleConfig("simple"), onnx: addSubModel("INT32", [-1, 16]) },
    });
  });
  after(() => repository?.remove());

  /** Only what differs from the defaults: loopback, HTTP on a free port, nothing else, no log. */
  const quiet = (): ServerOptionsInput => ({
    modelRepositories: [repository.path],
    host: "127.0.0.1",
    httpPort: 0,
    grpcPort: undefined,
    metricsPort: undefined,
    logLevel: "silent",
  });

  it("startServer with only what differs from the defaults, then stop()", async () => {
    const options = quiet();
    const server: RunningServer = await startServer(options);
    try {
      assert.equal(server.grpcPort, undefined);
      const url = `http://127.0.0.1:${server.httpPort}`;
      assert.equal((await getJson(`${url}/v2`)).body.version, SEQSERVE_VERSION);
      const a = rowsOf(2);
      assert.deepEqual(outputData(await infer(url, "simple", simpleInputs(a, a)), "OUTPUT0"), sum(a, a));
    } finally {
      await server.stop();
    }
  });

  it("the command line's options, as parseCommandLine reads them", async () => {
    const command: CliCommand = parseCommandLine([
      "--model-repository",
      repository.path,
      "--host=127.0.0.1",
      "--http-port=0",
      "--allow-grpc=false",
      "--allow-metrics=false",
      "--log-level=silent",
      "--id=embedded",
    ]);
    assert.equal(command.kind, "serve");
    if (command.kind !== "serve") return;
    const server = await startServer(command.options);
    try {
      assert.equal((await getJson(`http://127.0.0.1:${server.httpPort}/v2`)).body.name, "embedded");
    } finally {
      await server.stop();
    }
  });

  it("refuses wrong options before starting anything, naming the option", async () => {
    await assert.rejects(startServer({}), /^TypeError: seqserve options: no models to serve/);
    await assert.rejects(
      startServer({ modelRepositories: [repository.path], httpPort: 70_000 }),
      /^TypeError: seqserve option 'httpPort' must be a port from 0 to 65535, or undefined \(off\), got 70000$/,
    );
    await assert.rejects(
      startServer({ modelRepositories: [repository.path], logFormat: "xml" as never }),
      /option 'logFormat' must be json, text or ISO8601/,
    );
    await assert.rejects(
      startServer({ modelRepositories: [repository.path], sagemakerModel: 42 as never }),
      /option 'sagemakerModel' must be a model name, or undefined, got 42/,
    );
    await assert.rejects(
      startServer({ modelRepositories: [repository.path], tracing: "x" as never }),
      /option 'tracing' must be an object of trace settings, got "x"/,
    );
    await assert.rejects(
      startServer({
        modelRepositories: [repository.path],
        security: { limits: { maxStateBytes: "lots" as never } },
      }),
      /option 'security.limits.maxStateBytes' must be a whole number, got "lots"/,
    );
    await assert.rejects(
      startServer({
        modelRepositories: [repository.path],
        security: { limits: { maxStateByte: 1 } as never },
      }),
      /option 'security.limits.maxStateByte' is not a limit/,
    );
  });

  it("takes object options in part: what is left out keeps its default", async () => {
    const server = await startServer({
      ...quiet(),
      // A config.pbtxt is all strict mode needs.
      strictModelConfig: true,
      security: {
        access: { apiKeys: [{ name: "a", secret: "0123456789abcdef0123", groups: ["inference"] }] },
        limits: { maxStateBytes: 1 << 20 },
      },
    });
    try {
      // The key guards inference; health stays open, as by default. The model loaded.
      assert.equal((await getJson(`http://127.0.0.1:${server.httpPort}/v2/health/ready`)).status, 200);
      assert.equal((await getJson(`http://127.0.0.1:${server.httpPort}/v2/models/simple/ready`)).status, 200);
      assert.equal((await getJson(`http://127.0.0.1:${server.httpPort}/v2/models/stats`)).status, 401);
    } finally {
      await server.stop();
    }
  });

  it("a state store that cannot be reached stops the start, naming it", async () => {
    await assert.rejects(
      startServer({
        modelRepositories: [repository.path],
        httpPort: 0,
        grpcPort: undefined,
        metricsPort: 0,
        logLevel: "silent",
        stateStore: "redis://127.0.0.1:1",
      }),
      /the state store at redis:\/\/127\.0\.0\.1:1 cannot be reached/,
    );
  });
});
