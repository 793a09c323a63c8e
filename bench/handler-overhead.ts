// What model code costs per request beside an ONNX model doing the same trivial work, in
// one run on one machine: a handler that returns its input against an ONNX Identity model,
// and a handler keeping a running sum per sequence against the accumulator (ONNX, implicit
// state). The server runs as its own process; requests are KServe HTTP with binary tensors.
// Run: node --import tsx bench/handler-overhead.ts [--seconds 8] [--connections 32]
//
//   one at a time   one keep-alive connection, one request after the other; slices of each
//                   model alternate, so both see the same machine: µs per request, and the
//                   difference (the handler's own cost: a worker round trip, the JS call)
//   concurrent      `connections` clients at once: requests per second for each model
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { accumulatorModel } from "../tools/onnx/sequence-models.ts";
import { identityModel } from "../tools/onnx/test-models.ts";
import { binaryRequest, HttpClient, runLoops } from "./load-clients.ts";
import { startServerProcess } from "./server-process.ts";

const { values } = parseArgs({
  options: {
    seconds: { type: "string", default: "8" },
    warmup: { type: "string", default: "1" },
    connections: { type: "string", default: "32" },
  },
});
const SECONDS = Number(values.seconds);
const WARMUP = Number(values.warmup);
const CONNECTIONS = Number(values.connections);

const IDENTITY_HANDLER = `
export default {
  execute(requests: any[]) {
    return requests.map((r) => ({ outputs: { OUTPUT0: r.inputs.INPUT0 } }));
  },
};
`;

const SUM_HANDLER = `
export default {
  execute(requests: any[]) {
    return requests.map((r) => {
      const state = r.sequence.state;
      const sum = (state.get("sum") ?? 0) + r.inputs.INPUT.data[0];
      state.set("sum", sum);
      return { outputs: { OUTPUT: { datatype: "INT32", shape: [1, 1], data: Int32Array.of(sum) } } };
    });
  },
};
`;

function repository(): string {
  const dir = mkdtempSync(join(tmpdir(), "seqserve-bench-handlers-"));
  const model = (name: string, config: string, file: string, content: string | Uint8Array) => {
    mkdirSync(join(dir, name, "1"), { recursive: true });
    writeFileSync(join(dir, name, "config.pbtxt"), config);
    writeFileSync(join(dir, name, "1", file), content);
  };
  const identity = (backend: string) => `
backend: "${backend}"
max_batch_size: 64
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 16 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 16 ] } ]
dynamic_batching { }
`;
  model("identity_onnx", identity("onnxruntime"), "model.onnx", identityModel("FP32", [-1, 16]));
  model("identity_handler", identity("typescript"), "model.ts", IDENTITY_HANDLER);
  const sum = (backend: string, state: string) => `
backend: "${backend}"
max_batch_size: 64
input [ { name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
sequence_batching {
  max_sequence_idle_microseconds: 600000000
  oldest { max_candidate_sequences: 1024 preferred_batch_size: [ 64 ] }
  ${state}
}
`;
  model(
    "sum_onnx",
    sum(
      "onnxruntime",
      `control_input [
    { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] },
    { name: "READY" control [ { kind: CONTROL_SEQUENCE_READY int32_false_true: [ 0, 1 ] } ] }
  ]
  state [ { input_name: "STATE" output_name: "STATE_OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]`,
    ),
    "model.onnx",
    accumulatorModel(),
  );
  model("sum_handler", sum("typescript", ""), "model.ts", SUM_HANDLER);
  return dir;
}

const identityBody = binaryRequest(
  [{ name: "INPUT0", datatype: "FP32", shape: [1, 16], bytes: Buffer.alloc(64) }],
  "",
);

let nextId = 1;
function sumBody(id: number, start: boolean) {
  return binaryRequest(
    [{ name: "INPUT", datatype: "INT32", shape: [1, 1], bytes: Buffer.from(Int32Array.of(1).buffer) }],
    `"sequence_id":${id}${start ? ',"sequence_start":true' : ""}`,
  );
}

async function post(client: HttpClient, model: string, request: { body: Buffer; headerLength: number }) {
  const res = await client.post(
    `/v2/models/${model}/infer`,
    { "inference-header-content-length": String(request.headerLength) },
    request.body,
  );
  if (res.status !== 200) throw new Error(`${model}: ${res.body.toString()}`);
}

/** A step of one client: stateless, or the next request of the client's own sequence. */
function stepper(client: HttpClient, model: string, stateful: boolean): () => Promise<void> {
  if (!stateful) return () => post(client, model, identityBody);
  const id = nextId++;
  let started = false;
  return () => {
    const request = sumBody(id, !started);
    started = true;
    return post(client, model, request);
  };
}

const dir = repository();
const server = await startServerProcess(dir);
try {
  const pairs = [
    ["identity_onnx", "identity_handler", false],
    ["sum_onnx", "sum_handler", true],
  ] as const;
  for (const [onnx, handler, stateful] of pairs) {
    const client = new HttpClient(server.httpPort, 1);
    const steps = { [onnx]: stepper(client, onnx, stateful), [handler]: stepper(client, handler, stateful) };
    const totals: Record<string, { requests: number; seconds: number }> = {
      [onnx]: { requests: 0, seconds: 0 },
      [handler]: { requests: 0, seconds: 0 },
    };
    const SLICES = 8;
    for (let slice = 0; slice < SLICES; slice++) {
      for (const model of [onnx, handler]) {
        const r = await runLoops(1, SECONDS / SLICES / 2, slice === 0 ? WARMUP : 0, () => steps[model]!());
        totals[model]!.requests += r.requests;
        totals[model]!.seconds += r.seconds;
      }
    }
    client.close();
    const us = (model: string) => (totals[model]!.seconds * 1e6) / totals[model]!.requests;
    const [a, b] = [us(onnx), us(handler)];
    process.stdout.write(
      `one at a time (${stateful ? "a sequence, state on the server" : "stateless"}), KServe HTTP binary\n` +
        `  ${onnx.padEnd(18)} ${a.toFixed(0).padStart(6)} µs/request  (${totals[onnx]!.requests} requests)\n` +
        `  ${handler.padEnd(18)} ${b.toFixed(0).padStart(6)} µs/request  (${totals[handler]!.requests} requests)\n` +
        `  handler overhead   ${(b - a).toFixed(0).padStart(6)} µs/request\n`,
    );

    for (const model of [onnx, handler]) {
      const concurrent = new HttpClient(server.httpPort, CONNECTIONS);
      const clients = Array.from({ length: CONNECTIONS }, () => stepper(concurrent, model, stateful));
      const r = await runLoops(CONNECTIONS, SECONDS / 2, WARMUP, (worker) => clients[worker]!());
      concurrent.close();
      process.stdout.write(
        `  ${CONNECTIONS} connections, ${model.padEnd(17)} ${(r.requests / r.seconds).toFixed(0).padStart(6)} requests/s\n`,
      );
    }
  }
} finally {
  await server.stop();
  rmSync(dir, { recursive: true, force: true });
}
