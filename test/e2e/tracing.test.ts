import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { Client, credentials, Metadata, type ServiceError } from "@grpc/grpc-js";
import type { MethodDefinition } from "@grpc/proto-loader";
import { SpanKind, SpanStatusCode } from "@opentelemetry/api";
import { InMemorySpanExporter, type ReadableSpan } from "@opentelemetry/sdk-trace-base";
import { type RunningServer, startServer } from "../../src/app/server.ts";
import { DEFAULT_TRACE_SETTINGS, type TraceSettings } from "../../src/config/trace-config.ts";
import { INFERENCE_SERVICE_NAME, packageDefinition } from "../../src/frontends/grpc/proto-definitions.ts";
import { silentLogger } from "../../src/observability/logger.ts";
import { accumulatorModel } from "../../tools/onnx/sequence-models.ts";
import { addSubModel, identityModel } from "../../tools/onnx/test-models.ts";
import { infer, outputData } from "../support/http-client.ts";
import { type TempRepository, tempRepository } from "../support/model-repository.ts";
import { accumulatorConfig, int32Input } from "../support/sequence-kit.ts";
import { rowsOf, simpleConfig, simpleInputs, sum } from "./support/serving.ts";

// Request tracing as Triton's --trace-config sets it, with an in-memory exporter in place
// of OTLP: one InferRequest span per traced request, with Triton's attributes and events
// and the sequence id, and child spans for its queue wait, its batch and the batch's
// model execution; the sampling rate and count; a caller's trace context (HTTP headers,
// gRPC metadata) joined and always traced; Triton's JSON trace file in triton mode.

const MODELS = {
  simple: { config: simpleConfig("simple"), onnx: addSubModel("INT32", [-1, 16]) },
  acc: {
    config: accumulatorConfig("acc", 4, "oldest { max_candidate_sequences: 4 }"),
    onnx: accumulatorModel(),
  },
};

const TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT_SPAN_ID = "00f067aa0ba902b7";
const TRACEPARENT = `00-${TRACE_ID}-${PARENT_SPAN_ID}-01`;

/** Keeps its spans when the server shuts the exporter down at stop (InMemorySpanExporter drops them). */
class KeepingExporter extends InMemorySpanExporter {
  override shutdown(): Promise<void> {
    return Promise.resolve();
  }
}

interface Traced {
  readonly server: RunningServer;
  readonly url: string;
  readonly exporter: InMemorySpanExporter;
}

async function tracedServer(repository: TempRepository, tracing: Partial<TraceSettings>): Promise<Traced> {
  const exporter = new KeepingExporter();
  const server = await startServer(
    {
      modelRepositories: [repository.path],
      host: "127.0.0.1",
      httpPort: 0,
      grpcPort: 0,
      metricsPort: undefined,
      exitTimeoutSecs: 5,
      tracing: { ...DEFAULT_TRACE_SETTINGS, mode: "opentelemetry", timestamps: true, ...tracing },
    },
    { logger: silentLogger(), traceExporter: exporter },
  );
  return { server, url: `http://127.0.0.1:${server.httpPort}`, exporter };
}

/** The spans of each traced request, by its InferRequest span. */
function traces(
  spans: readonly ReadableSpan[],
): { root: ReadableSpan; child: (name: string) => ReadableSpan }[] {
  return spans
    .filter((s) => s.name === "InferRequest")
    .map((root) => ({
      root,
      child: (name: string) => {
        const found = spans.find(
          (s) => s.name === name && s.spanContext().traceId === root.spanContext().traceId && s !== root,
        );
        assert.ok(found, `span ${name} of ${JSON.stringify(root.attributes)}: ${spans.map((s) => s.name)}`);
        return found;
      },
    }));
}

const ns = (time: readonly [number, number]): bigint => BigInt(time[0]) * 1_000_000_000n + BigInt(time[1]);
const parentOf = (span: ReadableSpan): string | undefined => span.parentSpanContext?.spanId;

/** An inference of the simple model with request id `r<seed>`, sending `headers`. */
async function simple(url: string, seed: number, headers: Record<string, string> = {}): Promise<void> {
  const a = rowsOf(seed);
  const response = await fetch(`${url}/v2/models/simple/infer`, {
    method: "POST",
    headers: { "content-type": "application/json", ...headers },
    body: JSON.stringify({ id: `r${seed}`, inputs: simpleInputs(a, a) }),
  });
  const answer = (await response.json()) as { outputs: { name: string; data: number[] }[] };
  assert.equal(response.status, 200);
  assert.deepEqual(answer.outputs.find((o) => o.name === "OUTPUT0")?.data, sum(a, a));
}

describe("tracing every request (rate 1) with OpenTelemetry", () => {
  let repository: TempRepository;
  let spans: ReadableSpan[];
  before(async () => {
    repository = tempRepository(MODELS);
    const { server, url, exporter } = await tracedServer(repository, { rate: 1 });
    await simple(url, 1);
    assert.deepEqual(outputData(await infer(url, "acc", int32Input(5), { start: true }), "OUTPUT"), [5]);
    assert.deepEqual(
      outputData(await infer(url, "acc", int32Input(3), { id: 77, start: true }), "OUTPUT"),
      [3],
    );
    assert.deepEqual(
      outputData(await infer(url, "acc", int32Input(4), { id: 77, end: true }), "OUTPUT"),
      [7],
    );
    const refused = await infer(url, "simple", simpleInputs(rowsOf(0, 9), rowsOf(0, 9)));
    assert.equal(refused.status, 400);
    await server.stop();
    spans = exporter.getFinishedSpans();
  });
  after(() => repository?.remove());

  it("makes one InferRequest span per request, with Triton's attributes and events", () => {
    const roots = traces(spans).map((t) => t.root);
    assert.equal(roots.length, 5);
    const first = roots.find((r) => r.attributes["triton.request_id"] === "r1")!;
    assert.equal(first.kind, SpanKind.SERVER);
    assert.deepEqual(
      { model: first.attributes["triton.model_name"], version: first.attributes["triton.model_version"] },
      { model: "simple", version: "1" },
    );
    assert.deepEqual(
      first.events.map((e) => e.name),
      ["REQUEST_START", "QUEUE_START", "COMPUTE_START", "COMPUTE_END", "REQUEST_END"],
    );
    assert.equal(first.resource.attributes["service.name"], "seqserve");
  });

  it("gives each request child spans for its queue wait, its batch and the batch's execution", () => {
    for (const { root, child } of traces(spans).filter((t) => t.root.status.code !== SpanStatusCode.ERROR)) {
      const queue = child("queue");
      const batch = child("batch");
      const compute = child("compute");
      const rootId = root.spanContext().spanId;
      assert.equal(parentOf(queue), rootId);
      assert.equal(parentOf(batch), rootId);
      assert.equal(parentOf(compute), batch.spanContext().spanId);
      assert.ok(ns(queue.startTime) === ns(root.startTime) && ns(queue.endTime) === ns(batch.startTime));
      assert.ok(ns(batch.endTime) === ns(root.endTime));
      assert.ok(ns(compute.startTime) >= ns(batch.startTime) && ns(compute.endTime) <= ns(batch.endTime));
      assert.equal(batch.attributes["seqserve.batch_size"], 1);
      assert.deepEqual(
        compute.events.map((e) => e.name),
        ["COMPUTE_START", "COMPUTE_INPUT_END", "COMPUTE_OUTPUT_START", "COMPUTE_END"],
      );
    }
  });

  it("names the sequence: the client's id, and the one the server assigned to a start without an id", () => {
    const sequences = traces(spans)
      .map((t) => t.root)
      .filter((r) => r.attributes["triton.model_name"] === "acc");
    assert.equal(sequences.length, 3);
    const ids = sequences.map((r) => r.attributes["seqserve.sequence_id"]);
    assert.equal(ids.filter((id) => id === "77").length, 2);
    const assigned = ids.find((id) => id !== "77");
    assert.match(String(assigned), /^\d+$/);
    const ending = sequences.find((r) => r.attributes["seqserve.sequence_end"] === true)!;
    assert.equal(ending.attributes["seqserve.sequence_id"], "77");
  });

  it("marks a failed request's span as an error, with its code and message", () => {
    const failed = traces(spans).filter((t) => t.root.status.code === SpanStatusCode.ERROR);
    assert.equal(failed.length, 1);
    assert.equal(failed[0]!.root.attributes["seqserve.error_code"], "INVALID_ARG");
    assert.match(failed[0]!.root.status.message ?? "", /batch/);
  });
});

describe("sampling: rate, count and a caller's trace context", () => {
  let repository: TempRepository;
  before(() => {
    repository = tempRepository({ simple: MODELS.simple });
  });
  after(() => repository?.remove());

  it("traces every rate-th request until count traces were taken", async () => {
    const { server, url, exporter } = await tracedServer(repository, { rate: 2, count: 2 });
    for (let i = 0; i < 10; i++) await simple(url, i);
    await server.stop();
    const ids = traces(exporter.getFinishedSpans()).map((t) => t.root.attributes["triton.request_id"]);
    assert.deepEqual(ids.sort(), ["r1", "r3"]);
  });

  it("with rate 0, traces only requests carrying a trace context, and joins their trace (HTTP and gRPC)", async () => {
    const { server, url, exporter } = await tracedServer(repository, { rate: 0 });
    await simple(url, 1);
    await simple(url, 2, { traceparent: TRACEPARENT, tracestate: "vendor=1" });
    await grpcInfer(server.grpcPort!, TRACEPARENT);
    await server.stop();
    const roots = traces(exporter.getFinishedSpans()).map((t) => t.root);
    assert.equal(roots.length, 2);
    for (const root of roots) {
      assert.equal(root.spanContext().traceId, TRACE_ID);
      assert.equal(parentOf(root), PARENT_SPAN_ID);
    }
    assert.deepEqual(roots.map((r) => r.attributes["triton.request_id"]).sort(), ["g1", "r2"]);
  });
});

/** A ModelInfer of the simple model with a traceparent in the call's metadata. */
async function grpcInfer(port: number, traceparent: string): Promise<void> {
  const method = (
    packageDefinition()[INFERENCE_SERVICE_NAME] as Record<string, MethodDefinition<object, object>>
  ).ModelInfer!;
  const client = new Client(`127.0.0.1:${port}`, credentials.createInsecure());
  const metadata = new Metadata();
  metadata.set("traceparent", traceparent);
  const values = Buffer.from(new Int32Array(16).fill(2).buffer);
  try {
    await new Promise<void>((resolve, reject) => {
      client.makeUnaryRequest(
        method.path,
        method.requestSerialize,
        method.responseDeserialize,
        {
          model_name: "simple",
          id: "g1",
          inputs: [
            { name: "INPUT0", datatype: "INT32", shape: [1, 16] },
            { name: "INPUT1", datatype: "INT32", shape: [1, 16] },
          ],
          raw_input_contents: [values, values],
        },
        metadata,
        (error: ServiceError | null) => (error ? reject(error) : resolve()),
      );
    });
  } finally {
    client.close();
  }
}

describe("OpenTelemetry tracing turned on while serving (Triton's trace extension)", () => {
  let repository: TempRepository;
  before(() => {
    repository = tempRepository({
      simple: MODELS.simple,
      words: { onnx: identityModel("BYTES", [-1]) },
    });
  });
  after(() => repository?.remove());

  it("shows the exporter's options, and traces once a client turns it on", async () => {
    const { server, url, exporter } = await tracedServer(repository, {
      timestamps: false,
      rate: 1,
      bspScheduleDelayMs: 50,
    });
    try {
      const launched = await (await fetch(`${url}/v2/models/simple/trace/setting`)).json();
      assert.deepEqual(launched, {
        trace_level: ["OFF"],
        trace_rate: "1",
        trace_count: "-1",
        trace_mode: "opentelemetry",
        url: "http://localhost:4318/v1/traces",
        resource: "service.name=seqserve",
        bsp_max_queue_size: "2048",
        bsp_schedule_delay: "50",
        bsp_max_export_batch_size: "512",
      });
      // Level OFF: not even a request with a trace context is traced, as in Triton.
      await simple(url, 1, { traceparent: TRACEPARENT });
      const on = await fetch(`${url}/v2/trace/setting`, {
        method: "POST",
        body: JSON.stringify({ trace_level: ["TIMESTAMPS"] }),
      });
      assert.equal(on.status, 200);
      await simple(url, 2);
      await simple(url, 3);
    } finally {
      await server.stop();
    }
    const ids = traces(exporter.getFinishedSpans()).map((t) => t.root.attributes["triton.request_id"]);
    assert.deepEqual(ids.sort(), ["r2", "r3"]);
  });
});

describe("Triton's trace file (mode triton)", () => {
  let repository: TempRepository;
  let tracesDir: TempRepository;
  after(() => {
    repository?.remove();
    tracesDir?.remove();
  });

  it("writes each traced request's model, timestamps and tensors as Triton's JSON trace", async () => {
    repository = tempRepository({
      simple: MODELS.simple,
      words: { onnx: identityModel("BYTES", [-1]) },
    });
    tracesDir = tempRepository();
    const file = join(tracesDir.path, "traces", "trace.json");
    const exporterless = await startServer(
      {
        modelRepositories: [repository.path],
        host: "127.0.0.1",
        httpPort: 0,
        grpcPort: undefined,
        metricsPort: undefined,
        exitTimeoutSecs: 5,
        tracing: { ...DEFAULT_TRACE_SETTINGS, timestamps: true, tensors: true, rate: 1, file },
      },
      { logger: silentLogger() },
    );
    await simple(`http://127.0.0.1:${exporterless.httpPort}`, 3);
    const words = await fetch(`http://127.0.0.1:${exporterless.httpPort}/v2/models/words/infer`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({
        inputs: [{ name: "INPUT0", datatype: "BYTES", shape: [2, 1], data: ["hello", "a,b"] }],
      }),
    });
    assert.equal(words.status, 200, await words.text());
    await exporterless.stop();
    const entries = JSON.parse(readFileSync(file, "utf8")) as Record<string, unknown>[];
    assert.deepEqual(entries[0], { id: 1, model_name: "simple", model_version: 1, request_id: "r3" });
    // As Triton's, an empty request id is left out.
    assert.deepEqual(
      entries.find((e) => e.id === 2 && e.model_name !== undefined),
      {
        id: 2,
        model_name: "words",
        model_version: 1,
      },
    );
    const stamps = entries
      .filter((e) => e.id === 1)
      .flatMap((e) => (e.timestamps as { name: string; ns: number }[] | undefined) ?? []);
    // The frontend's first, as Triton's trace_summary.py needs them.
    assert.deepEqual(
      stamps.map((s) => s.name),
      [
        "HTTP_RECV_START",
        "HTTP_RECV_END",
        "REQUEST_START",
        "QUEUE_START",
        "COMPUTE_START",
        "COMPUTE_INPUT_END",
        "COMPUTE_OUTPUT_START",
        "COMPUTE_END",
        "REQUEST_END",
      ],
    );
    for (let i = 1; i < stamps.length; i++) assert.ok(stamps[i]!.ns >= stamps[i - 1]!.ns);
    const tensors = entries.filter((e) => e.id === 1 && e.activity !== undefined);
    assert.deepEqual(
      tensors.map((e) => [e.activity, (e.tensor as { name: string }).name]),
      [
        ["TENSOR_QUEUE_INPUT", "INPUT0"],
        ["TENSOR_QUEUE_INPUT", "INPUT1"],
        ["TENSOR_BACKEND_OUTPUT", "OUTPUT0"],
        ["TENSOR_BACKEND_OUTPUT", "OUTPUT1"],
      ],
    );
    // The inputs as they came (they were given to the model's thread since).
    const input = tensors[0]!.tensor as Record<string, string>;
    assert.equal(input.data, rowsOf(3).join(","));
    const output = tensors[2]!.tensor as Record<string, string>;
    assert.equal(output.data, sum(rowsOf(3), rowsOf(3)).join(","));
    assert.deepEqual([output.shape, output.dtype], ["1,16", "INT32"]);
    // BYTES elements each quoted, as Triton's tracer writes them.
    const bytes = entries.filter((e) => e.id === 2 && e.activity !== undefined);
    assert.deepEqual(
      bytes.map((e) => (e.tensor as Record<string, string>).data),
      ['"hello","a,b"', '"hello","a,b"'],
    );
  });
});
