// Memory per idle sequence: N Silero VAD sequences started (one chunk each) and left
// open, in a server running in this process; the heap and external memory before and
// after (after a full GC), divided by N, beside the raw state bytes each sequence holds.
//
//   node --expose-gc --import tsx bench/idle-sequences.ts [--sequences 100000]
import { mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { startServer } from "../src/app/server.ts";
import { DEFAULT_SERVER_OPTIONS } from "../src/config/server-options.ts";
import { silentLogger } from "../src/observability/logger.ts";

const { values } = parseArgs({ options: { sequences: { type: "string", default: "100000" } } });
const N = Number(values.sequences);
const gc = (globalThis as { gc?: () => void }).gc;
if (gc === undefined) throw new Error("run with node --expose-gc");

const ROOT = fileURLToPath(new URL("..", import.meta.url));
const repository = mkdtempSync(join(tmpdir(), "seqserve-idle-"));
mkdirSync(join(repository, "vad", "1"), { recursive: true });
symlinkSync(`${ROOT}examples/models/silero_vad/1/model.onnx`, join(repository, "vad", "1", "model.onnx"));
const config = readFileSync(`${ROOT}examples/models/silero_vad_stateful/config.pbtxt`, "utf8")
  .replace(/^name: .*$/m, 'name: "vad"')
  .replace("max_candidate_sequences: 1024", `max_candidate_sequences: ${N + 1}`)
  .replace("max_sequence_idle_microseconds: 60000000", "max_sequence_idle_microseconds: 3600000000");
writeFileSync(join(repository, "vad", "config.pbtxt"), config);

const server = await startServer(
  {
    ...DEFAULT_SERVER_OPTIONS,
    modelRepositories: [repository],
    httpPort: undefined,
    grpcPort: undefined,
    metricsPort: undefined,
  },
  { logger: silentLogger() },
);
const model = server.repository.model("vad");
// No sockets here keep the process alive while requests wait for their batch.
const keepAlive = setInterval(() => {}, 1000);
const chunk = new Float32Array(512).map((_, i) => Math.sin(i / 10) * 0.1);
const sr = BigInt64Array.of(16000n);
const step = (id: bigint) =>
  model.infer({
    id: "",
    inputs: new Map([
      ["input", { datatype: "FP32", shape: [1, 512], data: chunk.slice() }],
      ["sr", { datatype: "INT64", shape: [], data: sr.slice() }],
    ]),
    outputs: undefined,
    parameters: {},
    sequence: { id, start: true, end: false, timeoutUs: undefined },
  });

const memory = () => {
  gc();
  gc();
  const m = process.memoryUsage();
  return m.heapUsed + m.external;
};
await step(1_000_000_000n); // warm: the slab and the worker exist
const before = memory();
for (let i = 0; i < N; i += 1024) {
  await Promise.all(Array.from({ length: Math.min(1024, N - i) }, (_, k) => step(BigInt(i + k + 1))));
}
const after = memory();
const summary = model.sequences!.summary();
// Ended now, so that stopping does not wait for them.
for (const s of model.sequences!.list()) model.sequences!.end(s.id);
const perSequence = (after - before) / N;
const raw = summary.stateBytes / summary.live;
process.stdout.write(
  `${summary.live} idle sequences: ${(perSequence).toFixed(0)} bytes each (raw state ${raw} bytes; target ${(1.25 * raw + 512).toFixed(0)}), ` +
    `state held ${(summary.stateBytes / 2 ** 20).toFixed(1)} MiB, reserved ${(summary.stateAllocatedBytes / 2 ** 20).toFixed(1)} MiB, ` +
    `RSS ${(process.memoryUsage().rss / 2 ** 20).toFixed(0)} MiB\n`,
);
await server.stop();
clearInterval(keepAlive);
rmSync(repository, { recursive: true, force: true });
