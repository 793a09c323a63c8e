// What Triton's system shared memory saves a client on the same machine: an FP32 identity
// model answering tensors of 64 KiB to 16 MiB, one request at a time, over gRPC ModelInfer
// and HTTP binary tensors, with the bytes in the request and answer or in shared memory
// (the input read from one region, the output written to another). The server runs as its
// own process (`npm run build` first); the modes alternate within each of --runs rounds,
// and the table gives the median round's requests/s.
//
//   node --import tsx bench/shared-memory.ts [--runs 3] [--duration 2]
import { randomUUID } from "node:crypto";
import {
  closeSync,
  ftruncateSync,
  mkdirSync,
  mkdtempSync,
  openSync,
  rmSync,
  writeFileSync,
  writeSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { Client, credentials, type ServiceError } from "@grpc/grpc-js";
import type { MethodDefinition } from "@grpc/proto-loader";
import { startServerProcess } from "../src/bench/server-process.ts";
import { INFERENCE_SERVICE_NAME, packageDefinition } from "../src/frontends/grpc/proto-definitions.ts";
import { identityModel } from "../tools/onnx/test-models.ts";

const { values } = parseArgs({
  options: { runs: { type: "string", default: "3" }, duration: { type: "string", default: "2" } },
});
const RUNS = Number(values.runs);
const DURATION_MS = Number(values.duration) * 1000;
const SIZES = [64 * 1024, 1024 * 1024, 16 * 1024 * 1024];

const dir = mkdtempSync(join(tmpdir(), "seqserve-bench-shm-"));
mkdirSync(join(dir, "identity", "1"), { recursive: true });
writeFileSync(
  join(dir, "identity", "config.pbtxt"),
  `backend: "onnxruntime"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1, -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1, -1 ] } ]
`,
);
writeFileSync(join(dir, "identity", "1", "model.onnx"), identityModel("FP32", [-1, -1]));

const key = `/seqserve-bench-${randomUUID()}`;
const largest = SIZES.at(-1)!;
const shm = openSync(`/dev/shm${key}`, "wx+", 0o600);
ftruncateSync(shm, 2 * largest);
writeSync(shm, new Uint8Array(largest).fill(1), 0, largest, 0);

const server = await startServerProcess(dir, [
  "--allow-client-shm",
  "true",
  "--http-max-body-bytes",
  String(64 * 1024 * 1024),
]);
const grpc = new Client(`127.0.0.1:${server.ports.grpc}`, credentials.createInsecure(), {
  "grpc.max_receive_message_length": -1,
  "grpc.max_send_message_length": -1,
});
const method = (name: string) =>
  (packageDefinition()[INFERENCE_SERVICE_NAME] as Record<string, MethodDefinition<object, object>>)[name]!;
const unary = (name: string, request: object): Promise<object> =>
  new Promise((resolve, reject) => {
    const m = method(name);
    grpc.makeUnaryRequest(
      m.path,
      m.requestSerialize,
      m.responseDeserialize,
      request,
      (e: ServiceError | null, r?: object) => (e ? reject(e) : resolve(r!)),
    );
  });
const http = `http://127.0.0.1:${server.ports.http}`;

await unary("SystemSharedMemoryRegister", { name: "in", key, offset: 0, byte_size: largest });
await unary("SystemSharedMemoryRegister", { name: "out", key, offset: largest, byte_size: largest });

type Mode = (bytes: number) => Promise<void>;
const shape = (bytes: number) => [1, bytes / 4];
const shmParameters = (region: string, bytes: number) => ({
  shared_memory_region: { string_param: region },
  shared_memory_byte_size: { int64_param: bytes },
});
const payload = new Uint8Array(largest).fill(1);
const MODES: Record<string, Mode> = {
  "gRPC, in the messages": async (bytes) => {
    await unary("ModelInfer", {
      model_name: "identity",
      inputs: [{ name: "INPUT0", datatype: "FP32", shape: shape(bytes) }],
      raw_input_contents: [payload.subarray(0, bytes)],
    });
  },
  "gRPC, shared memory": async (bytes) => {
    await unary("ModelInfer", {
      model_name: "identity",
      inputs: [
        { name: "INPUT0", datatype: "FP32", shape: shape(bytes), parameters: shmParameters("in", bytes) },
      ],
      outputs: [{ name: "OUTPUT0", parameters: shmParameters("out", bytes) }],
    });
  },
  "HTTP binary, in the body": async (bytes) => {
    const header = JSON.stringify({
      inputs: [
        { name: "INPUT0", datatype: "FP32", shape: shape(bytes), parameters: { binary_data_size: bytes } },
      ],
      outputs: [{ name: "OUTPUT0", parameters: { binary_data: true } }],
    });
    const response = await fetch(`${http}/v2/models/identity/infer`, {
      method: "POST",
      headers: { "inference-header-content-length": String(Buffer.byteLength(header)) },
      body: Buffer.concat([Buffer.from(header), payload.subarray(0, bytes)]),
    });
    await response.arrayBuffer();
    if (!response.ok) throw new Error(`HTTP ${response.status}`);
  },
  "HTTP, shared memory": async (bytes) => {
    const response = await fetch(`${http}/v2/models/identity/infer`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({
        inputs: [
          {
            name: "INPUT0",
            datatype: "FP32",
            shape: shape(bytes),
            parameters: { shared_memory_region: "in", shared_memory_byte_size: bytes },
          },
        ],
        outputs: [
          { name: "OUTPUT0", parameters: { shared_memory_region: "out", shared_memory_byte_size: bytes } },
        ],
      }),
    });
    await response.arrayBuffer();
    if (!response.ok) throw new Error(`HTTP ${response.status}`);
  },
};

async function rate(mode: Mode, bytes: number): Promise<number> {
  for (let i = 0; i < 3; i++) await mode(bytes);
  const start = performance.now();
  let done = 0;
  while (performance.now() - start < DURATION_MS) {
    await mode(bytes);
    done++;
  }
  return (done * 1000) / (performance.now() - start);
}

const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
try {
  const results = new Map<string, number[]>();
  for (let run = 0; run < RUNS; run++) {
    for (const bytes of SIZES) {
      for (const [name, mode] of Object.entries(MODES)) {
        const label = `${name}|${bytes}`;
        results.set(label, [...(results.get(label) ?? []), await rate(mode, bytes)]);
      }
    }
  }
  console.log(`| mode | ${SIZES.map((b) => `${b / 1024} KiB`).join(" | ")} |`);
  console.log(`|---|${SIZES.map(() => "---").join("|")}|`);
  for (const name of Object.keys(MODES)) {
    const cells = SIZES.map((bytes) => {
      const rates = results.get(`${name}|${bytes}`)!;
      return `${median(rates).toFixed(0)}/s (${Math.min(...rates).toFixed(0)}–${Math.max(...rates).toFixed(0)})`;
    });
    console.log(`| ${name} | ${cells.join(" | ")} |`);
  }
} finally {
  grpc.close();
  await server.stop();
  closeSync(shm);
  rmSync(`/dev/shm${key}`, { force: true });
  rmSync(dir, { recursive: true, force: true });
}
