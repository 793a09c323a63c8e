import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { after, before, describe, it } from "node:test";
import { FLAGS } from "../../src/cli/options.ts";
import { addSubModel } from "../../tools/onnx/test-models.ts";
import { TestClient } from "../grpc/support/grpc-harness.ts";
import { infer, outputData, postJson } from "../support/http-client.ts";
import { type TempRepository, tempRepository } from "../support/model-repository.ts";
import {
  BIN,
  type Exit,
  FREE_PORT_FLAGS,
  type ListeningLine,
  run,
  ServerProcess,
} from "../support/seqserve-process.ts";
import { rowsOf, simpleConfig, simpleInputs, sum } from "./support/serving.ts";

// The seqserve command as a user runs it: `node bin/seqserve.js …` in a child process.
// Its help, its usage errors (exit code 2), a start on free ports announced by one JSON
// log line, a clean stop on SIGTERM, and the `npm start` configuration.

const packageJson = JSON.parse(readFileSync(new URL("../../package.json", import.meta.url), "utf8")) as {
  version: string;
  scripts: Record<string, string>;
};

describe("seqserve --help", { timeout: 120_000 }, () => {
  let help: Exit;
  before(async () => {
    help = await run(["--help"]);
  });

  it("exits 0 and documents every flag, its help and its default", () => {
    assert.equal(help.code, 0, help.stderr);
    assert.match(help.stdout, /^Usage: seqserve --model-repository <dir> \[options\]$/m);
    for (const flag of FLAGS) {
      assert.match(help.stdout, new RegExp(`^  --${flag.name}(\\s|\\[|$)`, "m"), `--${flag.name} is listed`);
      assert.ok(help.stdout.includes(flag.help), `the help of --${flag.name}`);
      if (flag.default !== undefined) {
        assert.ok(
          help.stdout.includes(`${flag.help} (default: ${flag.default})`),
          `the default of --${flag.name}`,
        );
      }
    }
  });

  it("lists every command in its Usage block: serve and bench", () => {
    assert.match(help.stdout, /^ {7}seqserve serve \[options\] /m);
    assert.match(
      help.stdout,
      /^ {7}seqserve bench --model <name> \(--model-repository <dir> \| --url <http:\/\/host:port>\) \[options\]$/m,
    );
  });

  it("gives each flag one default: a share of memory, not also this machine's figure for it", () => {
    const lines = help.stdout.split("\n");
    for (const flag of FLAGS) {
      const text =
        lines[lines.findIndex((line) => new RegExp(`^  --${flag.name}(\\s|\\[|$)`).test(line)) + 1]!;
      assert.ok((text.match(/default:/g) ?? []).length <= 1, `--${flag.name}: ${text}`);
    }
    const stateLine = lines.find((line) => line.includes("Bytes every model's sequences may keep as state"))!;
    assert.match(stateLine, /\(default: half the memory the process may use/);
    assert.doesNotMatch(stateLine, /\(default: \d+\)/);
  });

  it("--version prints the package version", async () => {
    const version = await run(["--version"]);
    assert.equal(version.code, 0);
    assert.equal(version.stdout.trim(), packageJson.version);
  });
});

describe("usage errors exit with code 2 and a message naming the problem", {
  concurrency: true,
  timeout: 120_000,
}, () => {
  it("an unknown flag", async () => {
    const exit = await run(["--model-repository", "examples/models", "--no-such-flag"]);
    assert.equal(exit.code, 2);
    assert.match(exit.stderr, /^seqserve: .*'--no-such-flag'/m);
    assert.match(exit.stderr, /Run 'seqserve --help' for the options\./);
    assert.equal(exit.stdout, "");
  });

  it("a bad value", async () => {
    const port = await run(["--model-repository", "examples/models", "--http-port", "eighty"]);
    assert.equal(port.code, 2);
    assert.match(port.stderr, /^seqserve: --http-port expects a whole number, got 'eighty'$/m);
    const format = await run(["--model-repository", "examples/models", "--log-format=xml"]);
    assert.equal(format.code, 2);
    assert.match(
      format.stderr,
      /^seqserve: --log-format must be one of json, text, default, ISO8601, got 'xml'$/m,
    );
    const inflight = await run(["--model-repository", "examples/models", "--http-stream-max-inflight", "0"]);
    assert.equal(inflight.code, 2);
    assert.match(inflight.stderr, /^seqserve: --http-stream-max-inflight must be between 1 and \d+, got 0$/m);
  });

  it("a model repository that does not exist", async () => {
    const exit = await run(["--model-repository", "no/such/repository"]);
    assert.notEqual(exit.code, 0);
    assert.match(exit.stderr, /model repository 'no\/such\/repository' does not exist/);
  });

  it("no model repository at all", async () => {
    const exit = await run([]);
    assert.equal(exit.code, 2);
    assert.match(exit.stderr, /no models to serve: give --model-repository <dir>/);
  });
});

describe("a server started on free ports", { timeout: 120_000 }, () => {
  let repository: TempRepository;
  let server: ServerProcess;
  let listening: ListeningLine;
  before(async () => {
    repository = tempRepository({
      simple: { config: simpleConfig("simple"), onnx: addSubModel("INT32", [-1, 16]) },
    });
    server = new ServerProcess(process.execPath, [
      BIN,
      "--model-repository",
      repository.path,
      ...FREE_PORT_FLAGS,
    ]);
    listening = await server.listening;
  });
  after(async () => {
    await server?.stop();
    repository?.remove();
  });

  it("logs one JSON line with event 'listening' stating every bound port", () => {
    assert.equal(server.lines.filter((line) => line.event === "listening").length, 1);
    for (const port of [listening.http_port, listening.grpc_port, listening.metrics_port]) {
      assert.ok(typeof port === "number" && port > 0 && port < 65536, `port ${port}`);
    }
    assert.equal(new Set([listening.http_port, listening.grpc_port, listening.metrics_port]).size, 3);
  });

  it("answers on each of those ports", async () => {
    const http = `http://127.0.0.1:${listening.http_port}`;
    assert.equal((await fetch(`${http}/v2/health/ready`)).status, 200);
    const a = rowsOf(1);
    const b = rowsOf(2);
    assert.deepEqual(outputData(await infer(http, "simple", simpleInputs(a, b)), "OUTPUT0"), sum(a, b));

    const grpc = new TestClient(listening.grpc_port!);
    try {
      assert.deepEqual(await grpc.unary("ServerLive"), { live: true });
      assert.deepEqual(await grpc.unary("ModelReady", { name: "simple" }), { ready: true });
    } finally {
      grpc.close();
    }

    const metrics = await fetch(`http://127.0.0.1:${listening.metrics_port}/metrics`);
    assert.equal(metrics.status, 200);
    assert.match(await metrics.text(), /^nv_inference_request_success\{model="simple",version="1"\} 1$/m);
  });

  it("stops cleanly on SIGTERM: exit code 0, and it says so", async () => {
    const exit = await server.stop();
    assert.equal(exit.code, 0, exit.stderr);
    assert.equal(exit.signal, null);
    const events = server.lines.map((line) => line.event);
    assert.ok(events.includes("signal"), JSON.stringify(events));
    assert.equal(events.at(-1), "stopped");
    // Every line was one JSON log object.
    assert.deepEqual(server.notJson, []);
    assert.ok(server.lines.every((line) => typeof line.level === "number" && typeof line.msg === "string"));
  });
});

describe("the npm start configuration", { timeout: 120_000 }, () => {
  it("serves examples/models: every example model becomes ready", async () => {
    // `npm start` is `node bin/seqserve.js --model-repository examples/models`; the same
    // command, on free ports so it runs beside anything.
    const [command, ...args] = packageJson.scripts.start!.split(/\s+/);
    assert.equal(command, "node");
    const server = new ServerProcess(process.execPath, [...args, ...FREE_PORT_FLAGS]);
    try {
      const listening = await server.listening;
      const http = `http://127.0.0.1:${listening.http_port}`;
      assert.equal((await fetch(`${http}/v2/health/ready`)).status, 200);
      const index = (await postJson(`${http}/v2/repository/index`, {})).body as unknown as {
        name: string;
        version: string;
        state: string;
      }[];
      assert.deepEqual(
        index.map((e) => `${e.name}/${e.version}/${e.state}`),
        [
          "accumulator/1/READY",
          "session_context/1/READY",
          "silero_vad/1/READY",
          "silero_vad_stateful/1/READY",
          "simple/1/READY",
          "text_embedder/1/READY",
          "vad_segmenter/1/READY",
        ],
      );
      for (const model of ["simple", "silero_vad", "silero_vad_stateful", "accumulator"]) {
        assert.equal((await fetch(`${http}/v2/models/${model}/ready`)).status, 200, model);
      }
      // The README's first example request.
      const a = Array.from({ length: 16 }, (_, i) => i + 1);
      const ones = Array(16).fill(1);
      assert.deepEqual(
        outputData(await infer(http, "simple", simpleInputs(a, ones)), "OUTPUT0"),
        sum(a, ones),
      );
    } finally {
      const exit = await server.stop();
      assert.equal(exit.code, 0, exit.stderr);
    }
  });
});
