import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { DEFAULT_METRICS_SETTINGS } from "../../src/config/metrics-config.ts";
import { accumulatorModel } from "../../tools/onnx/sequence-models.ts";
import { addSubModel } from "../../tools/onnx/test-models.ts";
import { infer, outputData } from "../support/http-client.ts";
import { startTestServer, type TestServer } from "../support/test-server.ts";
import { rowsOf, simpleConfig, simpleInputs, sum } from "./support/serving.ts";

// The metrics port of a real server: Triton's nv_inference_* families with model and
// version labels, and seqserve's own, growing with the requests served.

const ACCUMULATOR_CONFIG = `
name: "acc"
backend: "onnxruntime"
max_batch_size: 2
input [ { name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
sequence_batching {
  max_sequence_idle_microseconds: 60000000
  control_input [
    { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] },
    { name: "READY" control [ { kind: CONTROL_SEQUENCE_READY int32_false_true: [ 0, 1 ] } ] }
  ]
  state [ { input_name: "STATE" output_name: "STATE_OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
}
`;

let server: TestServer;
before(async () => {
  server = await startTestServer({
    simple: { config: simpleConfig("simple"), onnx: addSubModel("INT32", [-1, 16]) },
    acc: { config: ACCUMULATOR_CONFIG, onnx: accumulatorModel() },
  });
});
after(() => server.stop());

interface Scrape {
  readonly text: string;
  readonly contentType: string;
  /** The value of `name` with exactly these labels; undefined when absent. */
  value(name: string, labels: Readonly<Record<string, string>>): number | undefined;
}

async function scrape(): Promise<Scrape> {
  const response = await fetch(server.metricsUrl);
  assert.equal(response.status, 200);
  const text = await response.text();
  const samples = new Map<string, number>();
  for (const line of text.split("\n")) {
    const match = /^([a-zA-Z_:][\w:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
    if (match === null) continue;
    const labels = [...(match[2] ?? "").matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)]
      .map(([, k, v]) => `${k}=${v}`)
      .sort()
      .join(",");
    samples.set(`${match[1]}{${labels}}`, Number(match[3]));
  }
  return {
    text,
    contentType: response.headers.get("content-type") ?? "",
    value: (name, labels) =>
      samples.get(
        `${name}{${Object.entries(labels)
          .map(([k, v]) => `${k}=${v}`)
          .sort()
          .join(",")}}`,
      ),
  };
}

const SIMPLE = { model: "simple", version: "1" };
const COUNTERS = [
  "nv_inference_request_success",
  "nv_inference_count",
  "nv_inference_exec_count",
  "nv_inference_request_duration_us",
  "nv_inference_queue_duration_us",
  "nv_inference_compute_input_duration_us",
  "nv_inference_compute_infer_duration_us",
  "nv_inference_compute_output_duration_us",
];

async function serveSimple(rows: number, seed: number): Promise<void> {
  const a = rowsOf(seed, rows);
  assert.deepEqual(outputData(await infer(server.url, "simple", simpleInputs(a, a)), "OUTPUT0"), sum(a, a));
}

describe("the metrics port", () => {
  it("serves Prometheus text with Triton's families, labelled by model and version, at zero", async () => {
    const metrics = await scrape();
    assert.match(metrics.contentType, /^text\/plain/);
    for (const name of COUNTERS) {
      assert.match(metrics.text, new RegExp(`^# TYPE ${name} counter$`, "m"), name);
      assert.equal(metrics.value(name, SIMPLE), 0, name);
    }
    assert.equal(metrics.value("nv_inference_pending_request_count", SIMPLE), 0);
    // Histograms too, as Triton creates them at load: an idle model is in a dashboard's sums.
    assert.equal(metrics.value("nv_inference_first_response_histogram_ms_count", SIMPLE), 0);
    assert.equal(metrics.value("seqserve_inference_request_duration_seconds_count", SIMPLE), 0);
    // Triton's pinned memory pool, which every Triton serves: empty here.
    assert.equal(metrics.value("nv_pinned_memory_pool_total_bytes", {}), 0);
    assert.equal(metrics.value("nv_pinned_memory_pool_used_bytes", {}), 0);
    // Triton's load time gauge: set once the version loaded.
    assert.match(metrics.text, /^# TYPE nv_model_load_duration_secs gauge$/m);
    assert.ok((metrics.value("nv_model_load_duration_secs", SIMPLE) ?? 0) > 0);
    assert.match(metrics.text, /^# TYPE nv_inference_request_failure counter$/m);
    for (const reason of ["REJECTED", "CANCELED", "BACKEND", "OTHER"]) {
      assert.equal(metrics.value("nv_inference_request_failure", { ...SIMPLE, reason }), 0, reason);
    }
  });

  it("grows with the requests served", async () => {
    for (const [i, rows] of [1, 2, 1].entries()) await serveSimple(rows, i);
    const bad = await infer(server.url, "simple", simpleInputs(rowsOf(0, 9), rowsOf(0, 9)));
    assert.equal(bad.status, 400);

    const first = await scrape();
    assert.equal(first.value("nv_inference_request_success", SIMPLE), 3);
    // A request refused before it reached the model (a batch larger than max_batch_size)
    // is no failure of the model's, in the metrics as in the statistics.
    assert.equal(first.value("nv_inference_request_failure", { ...SIMPLE, reason: "OTHER" }), 0);
    assert.equal(first.value("nv_inference_request_failure", { ...SIMPLE, reason: "BACKEND" }), 0);
    assert.equal(first.value("nv_inference_exec_count", SIMPLE), 3);
    assert.ok((first.value("nv_inference_count", SIMPLE) ?? 0) >= 3);
    for (const name of COUNTERS.filter((n) => n.endsWith("_duration_us") && !n.includes("queue"))) {
      assert.ok((first.value(name, SIMPLE) ?? 0) > 0, `${name} counts time`);
    }
    assert.equal(
      first.value("seqserve_inference_exec_count_by_batch_size", { ...SIMPLE, batch_size: "1" }),
      2,
    );
    assert.equal(
      first.value("seqserve_inference_exec_count_by_batch_size", { ...SIMPLE, batch_size: "2" }),
      1,
    );

    await serveSimple(1, 10);
    await serveSimple(1, 11);
    const second = await scrape();
    assert.equal(second.value("nv_inference_request_success", SIMPLE), 5);
    assert.equal(second.value("nv_inference_exec_count", SIMPLE), 5);
    assert.ok(
      (second.value("nv_inference_request_duration_us", SIMPLE) ?? 0) >
        (first.value("nv_inference_request_duration_us", SIMPLE) ?? 0),
    );
    assert.ok(
      (second.value("nv_inference_compute_infer_duration_us", SIMPLE) ?? 0) >
        (first.value("nv_inference_compute_infer_duration_us", SIMPLE) ?? 0),
    );
    assert.equal(
      second.value("seqserve_inference_exec_count_by_batch_size", { ...SIMPLE, batch_size: "1" }),
      4,
    );
  });

  // Triton's nv_inference_count: "a batch of n is counted as n inferences".
  it("nv_inference_count counts every row of a batched request", async () => {
    const metrics = await scrape();
    assert.equal(metrics.value("nv_inference_count", SIMPLE), 6);
  });

  it("counts sequences live and ended, by reason", async () => {
    const value = (v: number) => [{ name: "INPUT", datatype: "INT32", shape: [1, 1], data: [v] }];
    const ACC = { model: "acc", version: "1" };
    assert.deepEqual(
      outputData(await infer(server.url, "acc", value(2), { id: 5, start: true }), "OUTPUT"),
      [2],
    );
    const live = await scrape();
    assert.equal(live.value("seqserve_sequences_live", ACC), 1);
    assert.equal(live.value("seqserve_sequences_ended_total", { ...ACC, reason: "end" }), 0);
    assert.equal(live.value("nv_inference_request_success", ACC), 1);
    assert.deepEqual(
      outputData(await infer(server.url, "acc", value(3), { id: 5, end: true }), "OUTPUT"),
      [5],
    );
    const ended = await scrape();
    assert.equal(ended.value("seqserve_sequences_live", ACC), 0);
    assert.equal(ended.value("seqserve_sequences_ended_total", { ...ACC, reason: "end" }), 1);
    assert.equal(ended.value("nv_inference_request_success", ACC), 2);

    // A request the model's scheduler refuses as it comes (no START, no live sequence) is
    // no failure, in the statistics and the metrics alike, as in Triton (whose Enqueue
    // returns the error before the request is counted); nor is its time request time.
    assert.equal((await infer(server.url, "acc", value(1), { id: 6 })).status, 400);
    const failed = await scrape();
    const stats = (await (await fetch(`${server.url}/v2/models/acc/stats`)).json()) as {
      model_stats: { inference_stats: { fail: { count: number } } }[];
    };
    assert.equal(stats.model_stats[0]!.inference_stats.fail.count, 0);
    assert.equal(failed.value("nv_inference_request_failure", { ...ACC, reason: "OTHER" }), 0);
    assert.equal(
      failed.value("nv_inference_request_duration_us", ACC),
      ended.value("nv_inference_request_duration_us", ACC),
    );
  });

  it("answers anything but GET /metrics with a 404", async () => {
    const response = await fetch(server.metricsUrl.replace("/metrics", "/other"));
    assert.equal(response.status, 404);
    await response.body?.cancel();
  });
});

describe("latency distributions, CPU and process metrics", () => {
  it("histograms of request, queue and compute time per model, Triton's first-response histogram, counts that match", async () => {
    const metrics = await scrape();
    const success = metrics.value("nv_inference_request_success", SIMPLE) ?? 0;
    assert.ok(success > 0);
    for (const name of [
      "seqserve_inference_request_duration_seconds",
      "seqserve_inference_queue_duration_seconds",
      "seqserve_inference_compute_duration_seconds",
      "nv_inference_first_response_histogram_ms",
    ]) {
      assert.match(metrics.text, new RegExp(`^# TYPE ${name} histogram$`, "m"), name);
      assert.equal(
        metrics.value(`${name}_count`, SIMPLE),
        success,
        `${name} counts every successful request`,
      );
      assert.equal(metrics.value(`${name}_bucket`, { ...SIMPLE, le: "+Inf" }), success);
    }
    assert.ok((metrics.value("seqserve_inference_request_duration_seconds_sum", SIMPLE) ?? 0) > 0);
  });

  it("Triton's CPU metrics, and Node's process metrics under their usual names", async () => {
    const metrics = await scrape();
    const utilization = metrics.value("nv_cpu_utilization", {}) ?? -1;
    assert.ok(utilization >= 0 && utilization <= 1, `nv_cpu_utilization ${utilization}`);
    const total = metrics.value("nv_cpu_memory_total_bytes", {}) ?? 0;
    const used = metrics.value("nv_cpu_memory_used_bytes", {}) ?? 0;
    assert.ok(total > 0 && used > 0 && used <= total);
    for (const name of [
      "process_cpu_seconds_total",
      "process_resident_memory_bytes",
      "nodejs_eventloop_lag_seconds",
    ]) {
      assert.match(metrics.text, new RegExp(`^# TYPE ${name} `, "m"), name);
    }
    assert.doesNotMatch(metrics.text, /seqserve_process_/);
  });
});

describe("--metrics-config", () => {
  let other: TestServer;
  before(async () => {
    other = await startTestServer(
      { simple: { config: simpleConfig("simple"), onnx: addSubModel("INT32", [-1, 16]) } },
      {
        metrics: {
          ...DEFAULT_METRICS_SETTINGS,
          counterLatencies: false,
          summaryLatencies: true,
          histogramLatencies: false,
          summaryQuantiles: [
            { quantile: 0.5, error: 0.05 },
            { quantile: 0.99, error: 0.001 },
          ],
          cpuMetrics: false,
        },
      },
    );
  });
  after(() => other.stop());

  it("summary_latencies=true publishes Triton's summaries with the quantiles asked; the families turned off are gone", async () => {
    const a = rowsOf(1);
    assert.deepEqual(outputData(await infer(other.url, "simple", simpleInputs(a, a)), "OUTPUT0"), sum(a, a));
    const text = await (await fetch(other.metricsUrl)).text();
    for (const name of [
      "nv_inference_request_summary_us",
      "nv_inference_queue_summary_us",
      "nv_inference_compute_input_summary_us",
      "nv_inference_compute_infer_summary_us",
      "nv_inference_compute_output_summary_us",
    ]) {
      assert.match(text, new RegExp(`^# TYPE ${name} summary$`, "m"), name);
      assert.match(text, new RegExp(`^${name}_count\\{model="simple",version="1"\\} 1$`, "m"), name);
      assert.match(text, new RegExp(`^${name}\\{quantile="0.99",model="simple",version="1"\\} `, "m"), name);
    }
    assert.doesNotMatch(text, /quantile="0.9"/);
    // seqserve's and Triton's series only: Node's own GC histogram may have buckets by now.
    assert.doesNotMatch(
      text,
      /nv_inference_request_duration_us|_histogram_ms|^seqserve_\S*_duration_seconds_bucket|nv_cpu_/m,
    );
    assert.match(text, /^nv_inference_request_success\{model="simple",version="1"\} 1$/m);
  });
});
