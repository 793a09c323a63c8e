import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { existsSync, mkdtempSync, readdirSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { promisify } from "node:util";
import { getJson, infer, inferBinary, outputData, postJson } from "../support/http-client.ts";
import { FREE_PORT_FLAGS, ROOT, ServerProcess } from "../support/seqserve-process.ts";
import {
  expectedBits,
  firstMismatch,
  SILERO_SAMPLE_RATE,
  SILERO_SAMPLES,
  sequenceAudio,
} from "../support/silero-oracle.ts";

// seqserve as a user gets it: `npm pack`, then a plain `npm install <tarball>` in an empty
// project (no flags, no .npmrc: the registry this machine reaches, as a user's machine
// reaches its own), then `npx seqserve` on the packaged example models. Every model must
// be READY and answer correctly (the Silero VAD sequence bit for bit against ONNX Runtime
// in this process); the package's library entry must start a server and type-check. The
// install's time and size are printed: they are figures, not assertions.

const exec = promisify(execFile);
const npm = process.platform === "win32" ? "npm.cmd" : "npm";
const npx = process.platform === "win32" ? "npx.cmd" : "npx";

/**
 * This machine's environment without what an npm script run sets (npm_config_* from the
 * repository's .npmrc, npm_package_*, …) or a user's ONNX Runtime choice: the install must
 * work as an outside user's would.
 */
function userEnvironment(): Record<string, string> {
  const env: Record<string, string> = {};
  for (const [name, value] of Object.entries(process.env)) {
    if (value === undefined) continue;
    if (/^(npm_|INIT_CWD$|ONNXRUNTIME_NODE_INSTALL)/i.test(name)) continue;
    env[name] = value;
  }
  return env;
}

function bytesUnder(path: string): number {
  const stats = statSync(path);
  if (!stats.isDirectory()) return stats.size;
  let total = 0;
  for (const entry of readdirSync(path)) total += bytesUnder(join(path, entry));
  return total;
}

const megabytes = (bytes: number): string => `${(bytes / 1e6).toFixed(1)} MB`;

describe("the packed package, installed in an empty project", { timeout: 600_000 }, () => {
  const work = mkdtempSync(join(tmpdir(), "seqserve-pack-"));
  const project = join(work, "project");
  const env = userEnvironment();
  let tarball: string;
  let files: string[];
  let server: ServerProcess;
  let url: string;

  before(async () => {
    // The package as `npm test` built it (its first step): `npm pack` without scripts, as
    // its `prepare` would delete dist/ and build it again under the other tests' feet.
    const packed = await exec(npm, ["pack", "--json", "--ignore-scripts", "--pack-destination", work], {
      cwd: ROOT,
      env,
      maxBuffer: 64 * 1024 * 1024,
    });
    const [info] = JSON.parse(packed.stdout) as {
      filename: string;
      size: number;
      files: { path: string }[];
    }[];
    tarball = join(work, info!.filename);
    files = info!.files.map((f) => f.path);
    console.log(`tarball: ${megabytes(info!.size)}, ${files.length} files`);

    writeFileSync(join(work, ".keep"), "");
    rmSync(project, { recursive: true, force: true });
    await exec("mkdir", ["-p", project]);
    writeFileSync(
      join(project, "package.json"),
      JSON.stringify({ name: "consumer", version: "1.0.0", private: true, type: "module" }),
    );
    const started = performance.now();
    const installed = await exec(npm, ["install", tarball], {
      cwd: project,
      env,
      maxBuffer: 64 * 1024 * 1024,
    });
    const seconds = (performance.now() - started) / 1000;
    console.log(
      `npm install: ${seconds.toFixed(1)} s, node_modules ${megabytes(bytesUnder(join(project, "node_modules")))}`,
    );
    console.log(installed.stdout.trim());
  });

  after(async () => {
    await server?.stop();
    rmSync(work, { recursive: true, force: true });
  });

  it("ships compiled JavaScript with declarations, the protos and the example models, and no sources or tests", () => {
    for (const file of [
      "dist/index.js",
      "dist/index.d.ts",
      "dist/cli/main.js",
      "dist/backends/onnx/onnx-worker.js",
    ]) {
      assert.ok(files.includes(file), file);
    }
    for (const model of ["simple", "accumulator", "silero_vad", "silero_vad_stateful"]) {
      assert.ok(files.includes(`examples/models/${model}/config.pbtxt`), model);
      assert.ok(files.includes(`examples/models/${model}/1/model.onnx`), model);
    }
    assert.ok(files.includes("proto/grpc_service.proto"));
    assert.deepEqual(
      files.filter(
        (f) =>
          /^(src|test|tools|bench)\//.test(f) ||
          // Example clients and example model code (model.ts handlers) are meant to be read and run as they are.
          (f.endsWith(".ts") && !f.endsWith(".d.ts") && !f.startsWith("examples/")),
      ),
      [],
    );
  });

  it("installs with a plain npm install, without downloading ONNX Runtime's GPU libraries", () => {
    const bin = join(
      project,
      "node_modules",
      "onnxruntime-node",
      "bin",
      "napi-v6",
      process.platform,
      process.arch,
    );
    assert.ok(existsSync(join(bin, "onnxruntime_binding.node")));
    if (process.platform === "linux" && process.arch === "x64") {
      // The empty stand-ins the install step left; a download would have put the libraries there.
      assert.equal(statSync(join(bin, "libonnxruntime_providers_cuda.so")).size, 0);
    }
    assert.ok(!existsSync(join(project, "node_modules", "typescript")), "no TypeScript toolchain");
    assert.ok(!existsSync(join(project, "node_modules", "onnxruntime-web")), "no onnxruntime-web");
  });

  it("`npx seqserve` serves every packaged example model READY", async () => {
    server = new ServerProcess(
      npx,
      ["seqserve", "--model-repository", "node_modules/seqserve/examples/models", ...FREE_PORT_FLAGS],
      {},
      { cwd: project, baseEnv: env, group: true },
    );
    const listening = await server.listening;
    url = `http://127.0.0.1:${listening.http_port}`;
    assert.equal((await fetch(`${url}/v2/health/ready`)).status, 200);
    const index = (await postJson(`${url}/v2/repository/index`, {})).body as unknown as {
      name: string;
      state: string;
    }[];
    // Every example of the repository, ONNX models and model code alike.
    const examples = readdirSync(join(ROOT, "examples", "models"), { withFileTypes: true })
      .filter((entry) => entry.isDirectory())
      .map((entry) => entry.name)
      .sort();
    assert.deepEqual(
      index.map((e) => [e.name, e.state]),
      examples.map((name) => [name, "READY"]),
    );
    assert.equal((await getJson(`${url}/v2`)).body.name, "seqserve");
  });

  it("answers correctly: simple, an accumulator sequence, and a Silero VAD sequence bit for bit", async () => {
    const a = Array.from({ length: 16 }, (_, i) => i + 1);
    const simple = await infer(url, "simple", [
      { name: "INPUT0", datatype: "INT32", shape: [1, 16], data: a },
      { name: "INPUT1", datatype: "INT32", shape: [1, 16], data: a },
    ]);
    assert.deepEqual(
      outputData(simple, "OUTPUT0"),
      a.map((v) => 2 * v),
    );
    const step = (value: number) => [{ name: "INPUT", datatype: "INT32", shape: [1, 1], data: [value] }];
    assert.deepEqual(
      outputData(await infer(url, "accumulator", step(5), { id: 9, start: true }), "OUTPUT"),
      [5],
    );
    assert.deepEqual(
      outputData(await infer(url, "accumulator", step(3), { id: 9, end: true }), "OUTPUT"),
      [8],
    );

    const audio = sequenceAudio(0, 6);
    const [expected] = await expectedBits([audio]);
    const served: number[] = [];
    for (const [c, chunk] of audio.entries()) {
      const answer = await inferBinary(
        url,
        "silero_vad_stateful",
        [
          { name: "input", datatype: "FP32", shape: [1, SILERO_SAMPLES], data: chunk },
          { name: "sr", datatype: "INT64", shape: [], data: BigInt64Array.of(SILERO_SAMPLE_RATE) },
        ],
        { id: 21, start: c === 0, end: c === audio.length - 1 },
      );
      assert.equal(answer.status, 200, answer.error);
      served.push(answer.outputs.get("output")!.readUInt32LE(0));
    }
    assert.equal(firstMismatch(0, served, expected!), undefined);
  });

  it("stops cleanly on SIGTERM", async () => {
    const exit = await server.stop();
    assert.ok(
      server.lines.some((line) => line.event === "stopped"),
      `the server stopped: ${exit.stdout.slice(-2000)}${exit.stderr}`,
    );
  });

  it("is a library: startServer from the package, typed", async () => {
    writeFileSync(
      join(project, "app.ts"),
      `import { type RunningServer, type ServerOptionsInput, startServer } from "seqserve";
const options: ServerOptionsInput = {
  modelRepositories: ["node_modules/seqserve/examples/models"],
  host: "127.0.0.1",
  httpPort: 0,
  grpcPort: undefined,
  metricsPort: undefined,
  logLevel: "silent",
};
const server: RunningServer = await startServer(options);
const ready = await fetch(\`http://127.0.0.1:\${server.httpPort}/v2/models/simple/ready\`);
console.log(ready.status);
await server.stop();
// @ts-expect-error: a port is a number
void startServer({ modelRepositories: ["x"], httpPort: "8000" });
`,
    );
    writeFileSync(
      join(project, "tsconfig.json"),
      JSON.stringify({
        compilerOptions: {
          module: "nodenext",
          target: "es2023",
          strict: true,
          noEmit: true,
          allowImportingTsExtensions: true,
          typeRoots: [join(ROOT, "node_modules", "@types")],
          types: ["node"],
        },
        files: ["app.ts"],
      }),
    );
    const checked = await exec(join(ROOT, "node_modules", ".bin", "tsc"), ["-p", project], {
      cwd: project,
      env,
    }).catch((error: { stdout: string }) => error);
    assert.equal(checked.stdout, "", "the program type-checks against the package's declarations");
    // The same program as JavaScript (type annotations removed), run by plain node.
    writeFileSync(
      join(project, "app.mjs"),
      `import { startServer } from "seqserve";
const server = await startServer({
  modelRepositories: ["node_modules/seqserve/examples/models"],
  host: "127.0.0.1", httpPort: 0, grpcPort: undefined, metricsPort: undefined, logLevel: "silent",
});
const ready = await fetch(\`http://127.0.0.1:\${server.httpPort}/v2/models/simple/ready\`);
console.log(ready.status);
await server.stop();
`,
    );
    const ran = await exec(process.execPath, ["app.mjs"], { cwd: project, env });
    assert.equal(ran.stdout.trim(), "200");
  });
});
