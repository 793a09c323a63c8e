// seqserve beside the servers a user would write in an afternoon (bench/peers/), same
// machine, same client (seqserve bench), same run: Silero VAD v5 stateless (the client
// passes the state) and stateful (the state on the server), plus ONNX Runtime alone in this
// process and each server's idle memory. Each scenario runs --runs times, interleaved
// across the servers; the table gives the median with the spread (min–max). With
// --baseline, an earlier seqserve (a checkout with its dependencies installed, e.g. a git
// worktree of an older commit) runs every seqserve scenario too, as "before".
//
//   npm run bench -- [--runs 3] [--duration 10] [--only name,name] [--baseline dir] [--json file]
import { spawn } from "node:child_process";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import ort from "onnxruntime-node";
import { type BenchReport, runBench } from "../src/bench/bench-command.ts";
import { type BenchOptions, parseBenchArgs } from "../src/bench/bench-options.ts";
import { startServerProcess } from "../src/bench/server-process.ts";

const ROOT = fileURLToPath(new URL("..", import.meta.url));
const SILERO = `${ROOT}examples/models/silero_vad/1/model.onnx`;
const EXAMPLES = `${ROOT}examples/models`;

const { values } = parseArgs({
  options: {
    runs: { type: "string", default: "3" },
    duration: { type: "string", default: "10" },
    warmup: { type: "string", default: "2" },
    only: { type: "string" },
    baseline: { type: "string" },
    json: { type: "string" },
  },
});
const RUNS = Number(values.runs);
const only = values.only?.split(",");
const wanted = (name: string) => only === undefined || only.includes(name);

type Server = "before" | "seqserve" | "naive" | "python";

interface Scenario {
  readonly name: string;
  readonly model: string;
  readonly protocol: string;
  readonly concurrency: number;
  readonly sequenceLength?: number;
  readonly streams?: number;
  /** Which servers run it. */
  readonly servers: readonly Server[];
}

const SCENARIOS: readonly Scenario[] = [
  {
    name: "json-1",
    model: "silero_vad",
    protocol: "http-json",
    concurrency: 1,
    servers: ["seqserve", "naive", "python"],
  },
  {
    name: "json-64",
    model: "silero_vad",
    protocol: "http-json",
    concurrency: 64,
    servers: ["seqserve", "naive", "python"],
  },
  {
    name: "binary-64",
    model: "silero_vad",
    protocol: "http-binary",
    concurrency: 64,
    servers: ["seqserve", "naive", "python"],
  },
  {
    name: "grpc-64",
    model: "silero_vad",
    protocol: "grpc",
    concurrency: 64,
    servers: ["seqserve", "python"],
  },
  {
    name: "stateful-grpc-stream-256",
    model: "silero_vad_stateful",
    protocol: "grpc-stream",
    concurrency: 256,
    sequenceLength: 50,
    streams: 16,
    servers: ["seqserve", "python"],
  },
  {
    name: "stateful-http-binary-256",
    model: "silero_vad_stateful",
    protocol: "http-binary",
    concurrency: 256,
    sequenceLength: 50,
    servers: ["seqserve", "python"],
  },
  {
    name: "stateful-ws-256",
    model: "silero_vad_stateful",
    protocol: "ws",
    concurrency: 256,
    sequenceLength: 50,
    servers: ["seqserve"],
  },
];

const unknown = (only ?? []).filter((name) => !SCENARIOS.some((s) => s.name === name));
if (unknown.length > 0) {
  // A misspelt name would have been left out of the comparison without a word.
  console.error(
    `--only: no scenario ${unknown.join(", ")}; the scenarios: ${SCENARIOS.map((s) => s.name).join(", ")}`,
  );
  process.exit(2);
}

function freePort(): Promise<number> {
  return new Promise((resolve) => {
    const server = createServer();
    server.listen(0, "127.0.0.1", () => {
      const address = server.address();
      server.close(() => resolve(typeof address === "object" && address !== null ? address.port : 0));
    });
  });
}

function rssMb(pid: number): number {
  const status = readFileSync(`/proc/${pid}/status`, "utf8");
  return Number(/VmRSS:\s+(\d+)/.exec(status)?.[1] ?? 0) / 1024;
}

interface Peer {
  readonly http: number;
  readonly grpc: number | undefined;
  readonly pid: number;
  stop(): void;
}

/** Starts a peer process; resolves once it prints its "listening" line. */
function startPeer(command: string, args: string[], http: number, grpc: number | undefined): Promise<Peer> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, { stdio: ["ignore", "pipe", "inherit"] });
    child.once("exit", (code) => reject(new Error(`${command} exited (${code}) before listening`)));
    child.stdout!.on("data", (chunk: Buffer) => {
      if (chunk.toString().includes("listening")) {
        resolve({ http, grpc, pid: child.pid!, stop: () => child.kill("SIGTERM") });
      }
    });
  });
}

async function pythonPeer(): Promise<Peer | undefined> {
  if (!existsSync(`${ROOT}.bench/venv/bin/python`)) {
    const setup = spawn(`${ROOT}bench/peers/setup-python.sh`, { stdio: "inherit" });
    const code = await new Promise<number | null>((resolve) => setup.once("exit", resolve));
    if (code !== 0) {
      process.stdout.write(
        "python peer skipped: its environment could not be set up (python3 and pip's index needed)\n",
      );
      return undefined;
    }
  }
  const [http, grpc] = [await freePort(), await freePort()];
  return startPeer(
    `${ROOT}.bench/venv/bin/python`,
    [`${ROOT}bench/peers/python_server.py`, String(http), String(grpc), SILERO, `${ROOT}.bench/python-stubs`],
    http,
    grpc,
  );
}

/** An earlier seqserve, from its own checkout, on the same example models. */
async function baselineServer(dir: string): Promise<Peer> {
  const [http, grpc, metrics] = [await freePort(), await freePort(), await freePort()];
  return startPeer(
    process.execPath,
    [
      `${dir}/bin/seqserve.js`,
      "--model-repository",
      `${dir}/examples/models`,
      "--host",
      "127.0.0.1",
      "--http-port",
      String(http),
      "--grpc-port",
      String(grpc),
      "--metrics-port",
      String(metrics),
      "--log-format",
      "json",
    ],
    http,
    grpc,
  );
}

async function naivePeer(): Promise<Peer> {
  const http = await freePort();
  return startPeer(
    process.execPath,
    ["--import", "tsx", `${ROOT}bench/peers/naive-fastify.ts`, String(http), SILERO],
    http,
    undefined,
  );
}

async function inProcess(batch: number, seconds: number): Promise<number> {
  const session = await ort.InferenceSession.create(SILERO, {
    intraOpNumThreads: 1,
    executionMode: "sequential",
  });
  const input = new ort.Tensor(
    "float32",
    new Float32Array(batch * 512).map(() => Math.random() - 0.5),
    [batch, 512],
  );
  let state = new ort.Tensor("float32", new Float32Array(2 * batch * 128), [2, batch, 128]);
  const sr = new ort.Tensor("int64", BigInt64Array.of(16000n), []);
  let runs = 0;
  const end = performance.now() + seconds * 1000;
  while (performance.now() < end) {
    state = (await session.run({ input, state, sr })).stateN as typeof state;
    runs++;
  }
  await session.release();
  return (runs * batch) / seconds;
}

function options(scenario: Scenario, target: string[]): BenchOptions {
  return parseBenchArgs([
    "--model",
    scenario.model,
    "--protocol",
    scenario.protocol,
    "--concurrency",
    String(scenario.concurrency),
    "--duration",
    values.duration!,
    "--warmup",
    values.warmup!,
    "--input",
    "sr=16000",
    "--quiet",
    ...(scenario.sequenceLength === undefined ? [] : ["--sequence-length", String(scenario.sequenceLength)]),
    ...(scenario.streams === undefined ? [] : ["--streams", String(scenario.streams)]),
    ...target,
  ]) as BenchOptions;
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

async function main(): Promise<void> {
  const results: Record<string, Record<string, BenchReport[]>> = {};
  const rss: Record<string, number> = {};
  const seconds = Number(values.duration);
  process.stdout.write(
    `in-process ONNX Runtime: batch 1 ${(await inProcess(1, 3)).toFixed(0)}/s, batch 64 ${(await inProcess(64, 3)).toFixed(0)}/s\n`,
  );

  const before = values.baseline === undefined ? undefined : await baselineServer(values.baseline);
  const seqserve = await startServerProcess(EXAMPLES);
  await new Promise((r) => setTimeout(r, 2000));
  if (before !== undefined) rss.before = rssMb(before.pid);
  rss.seqserve = rssMb(seqserve.pid);
  const naive = await naivePeer();
  const python = await pythonPeer();
  await new Promise((r) => setTimeout(r, 2000));
  rss.naive = rssMb(naive.pid);
  if (python !== undefined) rss.python = rssMb(python.pid);
  const targets: Record<Server, string[] | undefined> = {
    before:
      before === undefined
        ? undefined
        : ["--url", `http://127.0.0.1:${before.http}`, "--grpc", `127.0.0.1:${before.grpc}`],
    seqserve: [
      "--url",
      `http://127.0.0.1:${seqserve.ports.http}`,
      "--grpc",
      `127.0.0.1:${seqserve.ports.grpc}`,
    ],
    naive: ["--url", `http://127.0.0.1:${naive.http}`],
    python:
      python === undefined
        ? undefined
        : ["--url", `http://127.0.0.1:${python.http}`, "--grpc", `127.0.0.1:${python.grpc}`],
  };
  try {
    for (const scenario of SCENARIOS.filter((s) => wanted(s.name))) {
      results[scenario.name] = {};
      for (let run = 0; run < RUNS; run++) {
        const servers: Server[] = scenario.servers.includes("seqserve")
          ? ["before", ...scenario.servers]
          : [...scenario.servers];
        for (const server of servers) {
          const target = targets[server];
          if (target === undefined) continue;
          const [report] = await runBench(options(scenario, target));
          (results[scenario.name]![server] ??= []).push(report!);
        }
      }
      const row = Object.entries(results[scenario.name]!)
        .map(([server, reports]) => {
          const rates = reports.map((r) => r.requestsPerSecond);
          const p99 = median(reports.map((r) => r.latencyMs.p99));
          return `${server} ${median(rates).toFixed(0)}/s (${Math.min(...rates).toFixed(0)}–${Math.max(...rates).toFixed(0)}) p99 ${p99.toFixed(1)} ms`;
        })
        .join(" | ");
      process.stdout.write(`${scenario.name.padEnd(26)} ${row}\n`);
    }
  } finally {
    await seqserve.stop();
    before?.stop();
    naive.stop();
    python?.stop();
  }
  process.stdout.write(
    `idle RSS MB: ${Object.entries(rss)
      .map(([k, v]) => `${k} ${v.toFixed(0)}`)
      .join(", ")}  (runs: ${RUNS} × ${seconds} s)\n`,
  );
  if (values.json !== undefined) writeFileSync(values.json, JSON.stringify({ results, rss }, null, 2));
}

await main();
