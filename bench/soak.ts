// Soak: a seqserve process under mixed load for a while (10 minutes by default), with its
// memory (RSS), open handles (file descriptors) and threads sampled, to show that nothing a
// long-running server holds keeps growing, and that every sequence stays exact throughout.
//
//   node --import tsx bench/soak.ts [--seconds 600] [--sample-secs 30]
//
// The load, all at once, on accumulator models (each step's answer is the running sum of
// the sequence's inputs: the oracle is exact integer arithmetic):
// - sequences started, stepped and ended over HTTP, a gRPC ModelStreamInfer stream, and
//   WebSocket streams, every answer checked;
// - sequences left to time out (their model ends them after 1 s without a request);
// - more sequences than a small model has slots, so some wait in its backlog;
// - gRPC streams cancelled and WebSockets dropped in the middle of a sequence;
// - the model reloaded through the repository API every 20 s (its live sequences move to
//   the new version and must go on exactly);
// - malformed requests of every kind.
// Linux only (reads /proc). Prints one line per sample and a summary.
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { Client, type ClientDuplexStream, credentials } from "@grpc/grpc-js";
import WebSocket from "ws";
import { startServerProcess } from "../src/bench/server-process.ts";
import { INFERENCE_SERVICE_NAME, packageDefinition } from "../src/frontends/grpc/proto-definitions.ts";
import { accumulatorConfig, accumulatorModel } from "../tools/onnx/sequence-models.ts";

const { values } = parseArgs({
  options: {
    seconds: { type: "string", default: "600" },
    "sample-secs": { type: "string", default: "30" },
  },
});
const DURATION_MS = Number(values.seconds) * 1000;
const SAMPLE_MS = Number(values["sample-secs"]) * 1000;

// ---- the server ----

const config = (name: string, candidates: number) =>
  accumulatorConfig(
    name,
    16,
    `max_sequence_idle_microseconds: 1000000\n  oldest { max_candidate_sequences: ${candidates} }`,
  );

const repository = mkdtempSync(join(tmpdir(), "seqserve-soak-"));
for (const [name, candidates] of [
  ["acc", 256],
  ["small", 2],
] as const) {
  mkdirSync(join(repository, name, "1"), { recursive: true });
  writeFileSync(join(repository, name, "config.pbtxt"), config(name, candidates));
  writeFileSync(join(repository, name, "1", "model.onnx"), accumulatorModel());
}

const server = await startServerProcess(repository, [
  "--model-control-mode",
  "explicit",
  "--load-model",
  "*",
]);
const ports = { http: server.ports.http!, grpc: server.ports.grpc!, metrics: server.ports.metrics! };
const base = `http://127.0.0.1:${ports.http}`;

// ---- the load ----

let running = true;
const stats = { steps: 0, mismatches: [] as string[], refused: 0, sequences: 0, reloads: 0, malformed: 0 };
const pause = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
let nextId = 1;
const newId = () => nextId++;

function check(where: string, got: unknown, expected: number): void {
  stats.steps++;
  if (got !== expected && stats.mismatches.length < 20)
    stats.mismatches.push(`${where}: ${String(got)} != ${expected}`);
}

async function httpStep(
  model: string,
  id: number,
  value: number,
  start: boolean,
  end: boolean,
): Promise<number | string> {
  const response = await fetch(`${base}/v2/models/${model}/infer`, {
    method: "POST",
    body: JSON.stringify({
      parameters: { sequence_id: id, sequence_start: start, sequence_end: end },
      inputs: [{ name: "INPUT", datatype: "INT32", shape: [1, 1], data: [value] }],
    }),
  });
  const json = (await response.json()) as { outputs?: { data: number[] }[]; error?: string };
  return json.outputs?.[0]?.data[0] ?? `${response.status} ${json.error}`;
}

/** Sequences over HTTP, one step at a time, ended; some left to time out. */
async function httpSequences(model: string, abandonEvery: number): Promise<void> {
  while (running) {
    const id = newId();
    const length = 5 + (id % 20);
    let sum = 0;
    stats.sequences++;
    const abandon = id % abandonEvery === 0;
    for (let step = 0; step < length && running; step++) {
      const value = (id * 7 + step) % 100;
      sum += value;
      const last = step === length - 1;
      const got = await httpStep(model, id, value, step === 0, last && !abandon);
      if (typeof got === "string" && got.startsWith("503")) {
        stats.refused++;
        break;
      }
      check(`http ${model} ${id}/${step}`, got, sum);
      if (abandon && step === 2) break; // left to time out
    }
  }
}

const method = (
  packageDefinition()[INFERENCE_SERVICE_NAME] as Record<
    string,
    { path: string; requestSerialize: (v: object) => Buffer; responseDeserialize: (b: Buffer) => object }
  >
).ModelStreamInfer!;
const grpc = new Client(`127.0.0.1:${ports.grpc}`, credentials.createInsecure());

function streamRequest(id: number, value: number, start: boolean, end: boolean): object {
  return {
    model_name: "acc",
    id: `${id}`,
    parameters: {
      sequence_id: { int64_param: String(id) },
      sequence_start: { bool_param: start },
      sequence_end: { bool_param: end },
    },
    inputs: [{ name: "INPUT", datatype: "INT32", shape: [1, 1] }],
    raw_input_contents: [Buffer.from(Int32Array.of(value).buffer)],
  };
}

/** Batches of sequences on one ModelStreamInfer stream each; every fifth stream is cancelled midway. */
async function grpcStreams(): Promise<void> {
  let round = 0;
  while (running) {
    round++;
    const call = grpc.makeBidiStreamRequest(
      method.path,
      method.requestSerialize,
      method.responseDeserialize,
    ) as ClientDuplexStream<
      object,
      { error_message?: string; infer_response?: { raw_output_contents?: Buffer[] } }
    >;
    call.on("error", () => {});
    const answers: { error_message?: string; infer_response?: { raw_output_contents?: Buffer[] } }[] = [];
    call.on("data", (m) => answers.push(m));
    const ended = new Promise<void>((resolve) => call.on("status", () => resolve()));
    const cancel = round % 5 === 0;
    const ids = Array.from({ length: 8 }, newId);
    const sums = new Map<number, number>();
    const expected: number[] = [];
    stats.sequences += ids.length;
    for (let step = 0; step < 10; step++) {
      for (const id of ids) {
        const value = (id + step * 3) % 50;
        const sum = (sums.get(id) ?? 0) + value;
        sums.set(id, sum);
        expected.push(sum);
        call.write(streamRequest(id, value, step === 0, step === 9));
      }
      if (cancel && step === 4) break;
    }
    if (cancel) {
      await pause(5);
      call.cancel();
    } else call.end();
    await ended;
    answers.forEach((answer, i) => {
      const raw = answer.infer_response?.raw_output_contents?.[0];
      check(
        `grpc round ${round} #${i}`,
        raw === undefined ? answer.error_message : raw.readInt32LE(0),
        expected[i]!,
      );
    });
  }
}

/** WebSocket sequences; every fourth connection is dropped in the middle. */
async function webSockets(): Promise<void> {
  let round = 0;
  while (running) {
    round++;
    const id = newId();
    stats.sequences++;
    const socket = new WebSocket(`ws://127.0.0.1:${ports.http}/v2/models/acc/stream?sequence_id=${id}`);
    socket.on("error", () => {});
    const closed = new Promise<void>((resolve) => socket.on("close", () => resolve()));
    await new Promise<void>((resolve) => {
      socket.on("open", () => resolve());
      socket.on("close", () => resolve());
    });
    const values = Array.from({ length: 12 }, (_, i) => (id + i) % 30);
    const answers: number[] = [];
    socket.on("message", (data: Buffer, binary: boolean) => {
      if (binary) return;
      const json = JSON.parse(data.toString()) as { outputs?: { data: number[] }[] };
      if (json.outputs !== undefined) answers.push(json.outputs[0]!.data[0]!);
    });
    const drop = round % 4 === 0;
    values.forEach((value, step) => {
      if (drop && step > 5) return;
      socket.send(
        JSON.stringify({
          parameters: step === values.length - 1 ? { sequence_end: true } : {},
          inputs: [{ name: "INPUT", datatype: "INT32", shape: [1, 1], data: [value] }],
        }),
      );
    });
    if (drop) {
      await pause(5);
      socket.terminate();
    }
    // A connection the server closed without an answer to everything still ends here.
    await Promise.race([closed, pause(15_000).then(() => socket.terminate())]);
    let sum = 0;
    answers.forEach((got, i) => {
      sum += values[i]!;
      check(`ws ${id}/${i}`, got, sum);
    });
  }
}

/** The model reloaded, unchanged, through the repository API: live sequences move on. */
async function reloads(): Promise<void> {
  for (let waited = 0; running; waited += 500) {
    await pause(500);
    if (!running) return;
    if (waited % 20_000 !== 0 || waited === 0) continue;
    const response = await fetch(`${base}/v2/repository/models/acc/load`, { method: "POST" });
    if (response.status === 200) stats.reloads++;
    else stats.mismatches.push(`reload: ${response.status} ${await response.text()}`);
  }
}

/** Requests every frontend must refuse cleanly. */
async function malformed(): Promise<void> {
  const bodies = [
    "{",
    '{"inputs":[{"name":"INPUT","datatype":"INT32","shape":[1,4294967296],"data":[1]}]}',
    '{"inputs":[{"name":"INPUT","datatype":"BYTES","shape":[1,1],"data":["a\\u0000b"]}]}',
    `{"parameters":{"sequence_id":"${"x".repeat(1000)}","sequence_start":true},"inputs":[]}`,
    '{"inputs":"none"}',
  ];
  let i = 0;
  while (running) {
    const response = await fetch(`${base}/v2/models/acc/infer`, {
      method: "POST",
      body: bodies[i++ % bodies.length],
    });
    await response.text();
    stats.malformed++;
    if (response.status >= 500) stats.mismatches.push(`malformed: ${response.status}`);
    await pause(20);
  }
}

// ---- sampling ----

interface Sample {
  readonly atS: number;
  readonly rssMiB: number;
  readonly fds: number;
  readonly threads: number;
  readonly live: number;
  readonly steps: number;
}

function sample(startMs: number): Sample {
  const status = readFileSync(`/proc/${server.pid}/status`, "utf8");
  const field = (name: string) =>
    Number(new RegExp(`^${name}:\\s+(\\d+)`, "m").exec(status)?.[1] ?? Number.NaN);
  return {
    atS: Math.round((Date.now() - startMs) / 1000),
    rssMiB: Math.round(field("VmRSS") / 102.4) / 10,
    fds: readdirSync(`/proc/${server.pid}/fd`).length,
    threads: field("Threads"),
    live: 0,
    steps: stats.steps,
  };
}

async function liveSequences(): Promise<number> {
  const text = await (await fetch(`http://127.0.0.1:${ports.metrics}/metrics`)).text();
  let live = 0;
  for (const match of text.matchAll(/^seqserve_sequences_live\{[^}]*\} (\d+)/gm)) live += Number(match[1]);
  return live;
}

const startMs = Date.now();
const samples: Sample[] = [];
const load = Promise.all([
  httpSequences("acc", 6),
  httpSequences("acc", 10),
  httpSequences("small", 4),
  httpSequences("small", 5),
  httpSequences("small", 7),
  grpcStreams(),
  webSockets(),
  webSockets(),
  reloads(),
  malformed(),
]);
console.log("t(s)  RSS(MiB)  fds  threads  live-seqs  checked-steps");
while (Date.now() - startMs < DURATION_MS) {
  const s = { ...sample(startMs), live: await liveSequences() };
  samples.push(s);
  console.log(
    `${String(s.atS).padStart(4)}  ${String(s.rssMiB).padStart(8)}  ${String(s.fds).padStart(3)}  ${String(s.threads).padStart(7)}  ${String(s.live).padStart(9)}  ${String(s.steps).padStart(13)}`,
  );
  await pause(Math.min(SAMPLE_MS, DURATION_MS - (Date.now() - startMs)) || 1);
}
running = false;
await load;
await pause(2500); // idle sequences time out
const final = { ...sample(startMs), live: await liveSequences() };
samples.push(final);
const ended = (await (await fetch(`${base}/v2/models/acc/sequences`)).json()) as {
  summary: { ended: Record<string, number> };
};
const endedSmall = (await (await fetch(`${base}/v2/models/small/sequences`)).json()) as {
  summary: { ended: Record<string, number> };
};
grpc.close();
await server.stop();
rmSync(repository, { recursive: true, force: true });

// The first minute is the warm-up; a shorter run reports every sample.
const warmedUp = samples.some((s) => s.atS >= 60);
const afterWarmup = warmedUp ? samples.filter((s) => s.atS >= 60) : samples;
const range = (pick: (s: Sample) => number) => {
  const values = afterWarmup.map(pick);
  return `${Math.min(...values)}–${Math.max(...values)}`;
};
console.log(`\nafter ${Math.round((Date.now() - startMs) / 1000)} s:`);
console.log(
  `  sequences ${stats.sequences}, steps checked ${stats.steps}, mismatches ${stats.mismatches.length}`,
);
console.log(
  `  refused with 503 (backlog full) ${stats.refused}, reloads ${stats.reloads}, malformed requests ${stats.malformed}`,
);
console.log(`  ends (acc): ${JSON.stringify(ended.summary.ended)}`);
console.log(`  ends (small): ${JSON.stringify(endedSmall.summary.ended)}`);
console.log(
  `  ${warmedUp ? "from 60 s on" : "every sample"}: RSS ${range((s) => s.rssMiB)} MiB, fds ${range((s) => s.fds)}, threads ${range((s) => s.threads)}`,
);
console.log(
  `  at the end, idle: RSS ${final.rssMiB} MiB, fds ${final.fds}, threads ${final.threads}, live sequences ${final.live}`,
);
for (const mismatch of stats.mismatches) console.log(`  MISMATCH ${mismatch}`);
process.exitCode = stats.mismatches.length === 0 ? 0 : 1;
