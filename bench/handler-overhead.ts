// What model code costs per request beside an ONNX model doing the same trivial work, on
// one server in one run: a handler that returns its input against an ONNX Identity model,
// and a handler keeping a running sum per sequence against the accumulator (ONNX, implicit
// state, the same Oldest batching). The load is seqserve's own `bench` (KServe HTTP with
// binary tensors, random data), one request at a time and then 32 at once; the models
// alternate within each of --runs rounds, and the table gives the median round.
//
//   node --import tsx bench/handler-overhead.ts [--runs 3] [--duration 4] [--concurrency 32]
//
// The overhead is the difference of the medians at one request at a time: what a request
// costs to go to a worker thread's JavaScript and back, beside going to ONNX Runtime's.
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { type BenchReport, runBench } from "../src/bench/bench-command.ts";
import { parseBenchArgs } from "../src/bench/bench-options.ts";
import { startServerProcess } from "../src/bench/server-process.ts";
import { accumulatorModel } from "../tools/onnx/sequence-models.ts";
import { identityModel } from "../tools/onnx/test-models.ts";

const { values } = parseArgs({
  options: {
    runs: { type: "string", default: "3" },
    duration: { type: "string", default: "4" },
    concurrency: { type: "string", default: "32" },
  },
});
const RUNS = Number(values.runs);

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

const PAIRS = [
  ["identity_onnx", "identity_handler"],
  ["sum_onnx", "sum_handler"],
] as const;

const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

const dir = repository();
const server = await startServerProcess(dir);
try {
  const url = `http://127.0.0.1:${server.ports.http}`;
  const measure = async (model: string, concurrency: string): Promise<BenchReport> => {
    const options = parseBenchArgs([
      ...["--model", model, "--url", url, "--concurrency", concurrency, "--sequence-length", "100"],
      ...["--duration", values.duration!, "--warmup", "1", "--quiet"],
    ]);
    if (options === "help") throw new Error("unexpected help");
    return (await runBench(options))[0]!;
  };
  const p50: Record<string, number[]> = {};
  const throughput: Record<string, number[]> = {};
  for (let run = 0; run < RUNS; run++) {
    for (const model of PAIRS.flat()) {
      const one = await measure(model, "1");
      const many = await measure(model, values.concurrency!);
      (p50[model] ??= []).push(one.latencyMs.p50 * 1000);
      (throughput[model] ??= []).push(many.requestsPerSecond);
    }
  }
  process.stdout.write(`model               one at a time, p50   ${values.concurrency} at once\n`);
  for (const [onnx, handler] of PAIRS) {
    for (const model of [onnx, handler]) {
      process.stdout.write(
        `${model.padEnd(20)}${median(p50[model]!).toFixed(0).padStart(8)} µs${median(throughput[model]!).toFixed(0).padStart(14)} requests/s\n`,
      );
    }
    process.stdout.write(
      `  handler overhead  ${(median(p50[handler]!) - median(p50[onnx]!)).toFixed(0).padStart(8)} µs per request\n`,
    );
  }
} finally {
  await server.stop();
  rmSync(dir, { recursive: true, force: true });
}
