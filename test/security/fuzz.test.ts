import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { setFlagsFromString } from "node:v8";
import { runInNewContext } from "node:vm";
import { Client, credentials, Metadata, type ServiceError, type StatusObject } from "@grpc/grpc-js";
import fc from "fast-check";
import WebSocket from "ws";
import type { ModelStreamInferResponseMessage } from "../../src/frontends/grpc/messages.ts";
import { INFERENCE_SERVICE_NAME } from "../../src/frontends/grpc/proto-definitions.ts";
import { PREDICTION_SERVICE_NAME } from "../../src/frontends/tfs/proto-definitions.ts";
import { accumulatorModel } from "../../tools/onnx/sequence-models.ts";
import { identityModel } from "../../tools/onnx/test-models.ts";
import { TestClient } from "../grpc/support/grpc-harness.ts";
import { accumulatorRequest, int32Output } from "../support/grpc-stream-call.ts";
import { accumulate, accumulatorConfig } from "../support/sequence-kit.ts";
import { startTestServer, type TestServer } from "../support/test-server.ts";

// Malformed requests, generated with fast-check from a fixed seed, against every frontend
// at once: KServe JSON and binary over HTTP, protobuf over gRPC (well-formed messages with
// wrong contents, and bytes that are no protobuf at all), ModelStreamInfer streams,
// WebSocket frames, TF-Serving REST and gRPC, SageMaker headers and bodies. Every answer
// must be a refusal the client can act on (HTTP 4xx, 501, 503; a gRPC status other than
// INTERNAL and UNKNOWN), the server must keep serving, its memory must not grow, and
// sequences running beside the fuzzing, on the same model, must stay exact.

const SEED = 1_305_2026;
/** Runs per frontend; each run sends a batch of requests (see BATCH). */
const RUNS = 125;
const BATCH = 10;

const ACC = accumulatorConfig(
  "acc",
  8,
  "max_sequence_idle_microseconds: 2000000\n  oldest { max_candidate_sequences: 256 }",
);
const MODELS = {
  acc: { config: ACC, onnx: accumulatorModel() },
  floats: { onnx: identityModel("FP32", [-1, 4]) },
  strings: { onnx: identityModel("BYTES", [-1, -1]) },
};

/** Ids the oracle sequences use; the fuzzer never names them. */
const ORACLE_BASE = 9_000_000_000;

let server: TestServer;
let grpc: Client;
let sent = 0;
const failures: string[] = [];

before(async () => {
  server = await startTestServer(MODELS, { sagemakerPort: 0 });
  grpc = new Client(`127.0.0.1:${server.grpcPort}`, credentials.createInsecure());
});
after(async () => {
  grpc.close();
  await server.stop();
});

function record(where: string, what: string): void {
  if (failures.length < 20) failures.push(`${where}: ${what}`);
}

// ---- generators ----

const DATATYPES = ["BOOL", "UINT8", "INT32", "INT64", "UINT64", "FP16", "FP32", "FP64", "BYTES", "BF16"];
const NAMES = ["INPUT", "INPUT0", "OUTPUT0", "", "x"];
const MODEL_NAMES = ["acc", "floats", "strings", "nope", ""];

const dim = fc.oneof(
  fc.integer({ min: 0, max: 8 }),
  fc.constantFrom(-1, 2 ** 31, 2 ** 32, 2 ** 53, 1e300, 0.5),
);
const shape = fc.array(dim, { maxLength: 5 });
const scalar = fc.oneof(
  fc.integer(),
  fc.double(),
  fc.boolean(),
  fc.string({ maxLength: 8 }),
  fc.constant(null),
  fc.bigInt({ min: 0n, max: 2n ** 64n }).map(Number),
);
const data = fc.oneof(
  fc.array(scalar, { maxLength: 12 }),
  fc.array(fc.array(scalar, { maxLength: 4 }), { maxLength: 4 }),
  scalar,
  fc.constant(undefined),
);
/** Sequence parameters that never touch the oracle's ids. */
const sequenceId = fc.oneof(
  fc.integer({ min: -5, max: 1000 }),
  fc.string({ maxLength: 12 }),
  fc.constant("s".repeat(300)),
  fc.boolean(),
  fc.double(),
);
const parameters = fc.record(
  {
    sequence_id: sequenceId,
    sequence_start: fc.oneof(fc.boolean(), scalar),
    sequence_end: fc.oneof(fc.boolean(), scalar),
    timeout: fc.oneof(fc.integer(), scalar),
    binary_data_output: fc.oneof(fc.boolean(), scalar),
  },
  { requiredKeys: [] },
);
const input = fc.record(
  {
    name: fc.oneof(fc.constantFrom(...NAMES), fc.string({ maxLength: 6 })),
    datatype: fc.oneof(fc.constantFrom(...DATATYPES), fc.string({ maxLength: 6 })),
    shape: fc.oneof(shape, scalar),
    data,
    parameters: fc.oneof(
      fc.record(
        { binary_data_size: fc.oneof(fc.integer({ min: -1, max: 64 }), scalar) },
        { requiredKeys: [] },
      ),
      scalar,
    ),
  },
  { requiredKeys: [] },
);
/** Close to what a model takes: the inputs' real names and types, with shapes and data that may lie. */
const nearlyValidInput = fc.record({
  name: fc.constantFrom("INPUT0", "INPUT"),
  datatype: fc.constantFrom("FP32", "INT32", "BYTES"),
  shape,
  data,
});
const kserveBody = fc.oneof(
  fc.record(
    {
      inputs: fc.array(nearlyValidInput, { minLength: 1, maxLength: 2 }),
      parameters: fc.option(parameters, { nil: undefined }),
    },
    { requiredKeys: ["inputs"] },
  ),
  fc.record(
    {
      id: fc.oneof(fc.string({ maxLength: 6 }), scalar),
      inputs: fc.oneof(fc.array(input, { maxLength: 3 }), scalar),
      outputs: fc.oneof(fc.array(fc.record({ name: fc.constantFrom(...NAMES) }), { maxLength: 2 }), scalar),
      parameters: fc.oneof(parameters, scalar),
    },
    { requiredKeys: [] },
  ),
  fc.json({ maxDepth: 3 }).map((text) => JSON.parse(text) as unknown),
);
const bytes = fc.uint8Array({ maxLength: 96 });
const contentType = fc.constantFrom(
  undefined,
  "application/json",
  "text/plain",
  "application/octet-stream",
  "application/x-www-form-urlencoded",
  "application/vnd.sagemaker-triton.binary+json;json-header-size=7",
  "application/vnd.sagemaker-triton.binary+json;json-header-size=x",
  "multipart/form-data; boundary=x",
);
const contentEncoding = fc.constantFrom(undefined, undefined, undefined, "gzip", "deflate", "br", "zstd");

// ---- frontends ----

/** One HTTP request; its status must be a refusal or a success. */
async function http(
  port: number,
  method: string,
  path: string,
  body: Uint8Array | string | undefined,
  headers: Record<string, string | undefined>,
): Promise<void> {
  sent++;
  const clean = Object.fromEntries(Object.entries(headers).filter(([, v]) => v !== undefined)) as Record<
    string,
    string
  >;
  const response = await fetch(`http://127.0.0.1:${port}${path}`, {
    method,
    headers: clean,
    ...(body === undefined || method === "GET" ? {} : { body }),
  });
  const text = await response.text();
  if (response.status >= 500 && response.status !== 501 && response.status !== 503) {
    record(`${method} ${path}`, `${response.status} ${text.slice(0, 200)}`);
  }
}

function grpcCall(service: string, method: string, request: Buffer): Promise<void> {
  sent++;
  return new Promise((resolve) => {
    grpc.makeUnaryRequest(
      `/${service}/${method}`,
      (b: Buffer) => b,
      (b: Buffer) => b,
      request,
      new Metadata(),
      (error: ServiceError | null) => {
        // grpc-js refuses bytes that are no protobuf itself, with INTERNAL and this text.
        const undecodable = error?.details === "Error deserializing request";
        if (error !== null && (error.code === 13 || error.code === 2) && !undecodable) {
          record(`${service}/${method}`, `${error.code} ${error.details}`);
        }
        resolve();
      },
    );
  });
}

const kserveTypes = () =>
  import("../../src/frontends/grpc/proto-definitions.ts").then((m) =>
    m.inferenceTypes().lookupType("inference.ModelInferRequest"),
  );
const tfsTypes = () =>
  import("../../src/frontends/tfs/proto-definitions.ts").then((m) =>
    m.tfsTypes().lookupType("tensorflow.serving.PredictRequest"),
  );

// ---- the sequences that must stay exact ----

interface Oracle {
  steps: number;
  mismatches: string[];
  stop(): Promise<void>;
}

/** Sequences on `acc` over HTTP and a gRPC stream, each step checked against its running sum. */
function runOracle(): Oracle {
  const oracle: Oracle = { steps: 0, mismatches: [], stop: async () => {} };
  let running = true;
  const http = async (n: number) => {
    while (running) {
      const id = ORACLE_BASE + n * 1000 + oracle.steps;
      let sum = 0;
      for (let step = 0; step < 12 && running; step++) {
        const value = (step * 7 + n) % 13;
        sum += value;
        const got = await accumulate(server.url, "acc", value, { id, start: step === 0, end: step === 11 });
        oracle.steps++;
        if (got !== sum) oracle.mismatches.push(`http ${id} step ${step}: ${got} != ${sum}`);
      }
    }
  };
  const stream = async (n: number) => {
    const client = new TestClient(server.grpcPort);
    try {
      while (running) {
        const id = ORACLE_BASE + 500_000 + n * 1000 + oracle.steps;
        const call = client.stream();
        const answers: ModelStreamInferResponseMessage[] = [];
        call.on("data", (m: ModelStreamInferResponseMessage) => answers.push(m));
        const done = new Promise<void>((resolve) => call.on("end", resolve));
        call.on("error", () => {});
        const values = Array.from({ length: 16 }, (_, i) => (i * 5 + n) % 11);
        values.forEach((value, step) => {
          call.write(
            accumulatorRequest("acc", value, { id, start: step === 0, end: step === values.length - 1 }),
          );
        });
        call.end();
        await done;
        let sum = 0;
        values.forEach((value, step) => {
          sum += value;
          const answer = answers[step];
          const got =
            answer === undefined
              ? undefined
              : (answer.error_message ?? "") === ""
                ? int32Output(answer)
                : answer.error_message;
          if (got !== sum) oracle.mismatches.push(`grpc ${id} step ${step}: ${String(got)} != ${sum}`);
        });
        oracle.steps += values.length;
      }
    } finally {
      client.close();
    }
  };
  const all = Promise.all([http(1), stream(1)]);
  oracle.stop = async () => {
    running = false;
    await all;
  };
  return oracle;
}

function heapAfterGc(): number {
  setFlagsFromString("--expose-gc");
  const gc = runInNewContext("gc") as () => void;
  gc();
  gc();
  return process.memoryUsage().heapUsed;
}

test("10,000 malformed requests over every frontend: clean refusals only, the server serves on, sequences beside them exact, memory flat", {
  timeout: 300_000,
}, async () => {
  const httpPort = server.server.httpPort!;
  const sagemakerPort = server.server.sagemakerPort!;
  const inferType = await kserveTypes();
  const predictType = await tfsTypes();
  const oracle = runOracle();
  const settings = (offset: number) => ({ seed: SEED + offset, numRuns: RUNS });
  const batchOf = <T>(arbitrary: fc.Arbitrary<T>) =>
    fc.array(arbitrary, { minLength: BATCH, maxLength: BATCH });

  // Warm up, then take the heap as it is with everything loaded.
  await http(httpPort, "POST", "/v2/models/floats/infer", "{}", {});
  const heapBefore = heapAfterGc();

  // KServe JSON over HTTP, to every model and endpoint that takes a body.
  await fc.assert(
    fc.asyncProperty(
      batchOf(
        fc.tuple(
          fc.constantFrom(...MODEL_NAMES),
          fc.constantFrom("infer", "generate", "generate_stream"),
          kserveBody,
          contentType,
        ),
      ),
      async (batch) => {
        await Promise.all(
          batch.map(([model, endpoint, body, type]) =>
            http(
              httpPort,
              "POST",
              `/v2/models/${encodeURIComponent(model)}/${endpoint}`,
              JSON.stringify(body) ?? "",
              { "content-type": type },
            ),
          ),
        );
      },
    ),
    settings(1),
  );

  // KServe binary: a JSON header, then random bytes, with a header length that may lie.
  await fc.assert(
    fc.asyncProperty(
      batchOf(
        fc.tuple(
          fc.constantFrom(...MODEL_NAMES),
          kserveBody,
          bytes,
          fc.oneof(fc.nat({ max: 400 }).map(String), fc.string({ maxLength: 4 })),
          contentEncoding,
        ),
      ),
      async (batch) => {
        await Promise.all(
          batch.map(([model, body, tail, length, encoding]) => {
            const json = Buffer.from(JSON.stringify(body) ?? "");
            return http(
              httpPort,
              "POST",
              `/v2/models/${encodeURIComponent(model)}/infer`,
              Buffer.concat([json, tail]),
              {
                "inference-header-content-length": length,
                "content-encoding": encoding,
              },
            );
          }),
        );
      },
    ),
    settings(2),
  );

  // Protobuf over gRPC: well-formed ModelInferRequests with wrong contents, and bytes that are no protobuf.
  const grpcInput = fc.record({
    name: fc.constantFrom("INPUT0", "INPUT", ...NAMES),
    datatype: fc.constantFrom("FP32", "INT32", "BYTES", ...DATATYPES, "X"),
    shape: fc.array(
      fc.oneof(fc.integer({ min: 0, max: 6 }), fc.constantFrom(-1, 2 ** 32, 2 ** 40)).map(String),
      { maxLength: 4 },
    ),
    contents: fc.option(
      fc.record(
        {
          int_contents: fc.array(fc.integer(), { maxLength: 6 }),
          fp32_contents: fc.array(fc.float({ noNaN: false }), { maxLength: 6 }),
          bytes_contents: fc.array(bytes, { maxLength: 3 }),
          uint64_contents: fc.array(fc.bigInt({ min: 0n, max: 2n ** 64n - 1n }).map(String), {
            maxLength: 3,
          }),
        },
        { requiredKeys: [] },
      ),
      { nil: undefined },
    ),
  });
  const grpcParameter = fc.oneof(
    fc.record({
      int64_param: fc
        .bigInt({ min: -(2n ** 63n), max: 2n ** 63n - 1n })
        .filter((v) => v < BigInt(ORACLE_BASE))
        .map(String),
    }),
    fc.record({ string_param: fc.string({ maxLength: 300 }) }),
    fc.record({ bool_param: fc.boolean() }),
    fc.record({ double_param: fc.double() }),
  );
  const modelInfer = fc.record(
    {
      model_name: fc.constantFrom(...MODEL_NAMES),
      model_version: fc.constantFrom("", "1", "2", "x"),
      id: fc.string({ maxLength: 4 }),
      inputs: fc.array(grpcInput, { maxLength: 3 }),
      raw_input_contents: fc.array(bytes, { maxLength: 3 }),
      parameters: fc.dictionary(
        fc.constantFrom("sequence_id", "sequence_start", "sequence_end", "timeout", "x"),
        grpcParameter,
        { maxKeys: 4 },
      ),
    },
    { requiredKeys: [] },
  );
  await fc.assert(
    fc.asyncProperty(
      batchOf(
        fc.oneof(
          modelInfer.map((m) => Buffer.from(inferType.encode(inferType.fromObject(m)).finish())),
          bytes.map(Buffer.from),
        ),
      ),
      async (batch) => {
        await Promise.all(batch.map((message) => grpcCall(INFERENCE_SERVICE_NAME, "ModelInfer", message)));
      },
    ),
    settings(3),
  );

  // ModelStreamInfer: a stream of malformed requests is answered in-band, in order, and ends OK.
  await fc.assert(
    fc.asyncProperty(batchOf(modelInfer), async (messages) => {
      const client = new TestClient(server.grpcPort);
      try {
        const call = client.stream();
        let answers = 0;
        call.on("data", () => answers++);
        call.on("error", () => {});
        const status = new Promise<StatusObject>((resolve) => call.on("status", resolve));
        for (const message of messages)
          call.write(inferType.toObject(inferType.fromObject(message), { longs: String, defaults: false }));
        sent += messages.length;
        call.end();
        const ended = await status;
        if (ended.code !== 0 || answers !== messages.length)
          record("ModelStreamInfer", `${ended.code} ${ended.details} after ${answers} answers`);
      } finally {
        client.close();
      }
    }),
    settings(4),
  );

  // WebSocket frames: binary (framed or not) and text, to a sequence stream and a stateless one.
  await fc.assert(
    fc.asyncProperty(
      fc.constantFrom("acc", "floats", "strings"),
      batchOf(
        fc.oneof(
          bytes.map((b) => Buffer.from(b)),
          kserveBody.map((b) => JSON.stringify(b) ?? "null"),
          fc.string({ maxLength: 40 }),
        ),
      ),
      async (model, frames) => {
        const socket = new WebSocket(`ws://127.0.0.1:${httpPort}/v2/models/${model}/stream`);
        socket.on("error", () => {});
        const closed = new Promise<number>((resolve) => socket.on("close", (code: number) => resolve(code)));
        await new Promise<void>((resolve) => socket.on("open", () => resolve()));
        let answered = 0;
        const all = new Promise<void>((resolve) =>
          socket.on("message", () => {
            if (++answered === frames.length) resolve();
          }),
        );
        for (const frame of frames) socket.send(frame);
        sent += frames.length;
        await Promise.race([all, closed]);
        socket.close(1000);
        const code = await closed;
        // 1011 would be the server failing; 1006 a connection dropped without a close.
        if (code === 1011 || code === 1006) record(`WebSocket ${model}`, `closed ${code}`);
      },
    ),
    settings(5),
  );

  // TF-Serving: REST :predict bodies, and gRPC Predict messages.
  await fc.assert(
    fc.asyncProperty(
      batchOf(
        fc.tuple(
          fc.constantFrom(...MODEL_NAMES),
          fc.constantFrom(":predict", ":classify", "/metadata", "/versions/x:predict"),
          fc.oneof(
            fc.json({ maxDepth: 3 }),
            fc.record({ instances: data }, { requiredKeys: [] }).map((v) => JSON.stringify(v)),
            fc
              .record({
                inputs: fc.dictionary(
                  fc.constantFrom(...NAMES, "sequence_id", "sequence_control_input"),
                  data,
                ),
              })
              .map((v) => JSON.stringify(v)),
          ),
        ),
      ),
      async (batch) => {
        await Promise.all(
          batch.map(([model, action, body]) =>
            http(httpPort, "POST", `/v1/models/${encodeURIComponent(model)}${action}`, body, {}),
          ),
        );
      },
    ),
    settings(6),
  );
  const tensorProto = fc.record(
    {
      dtype: fc.integer({ min: 0, max: 30 }),
      tensor_shape: fc.record({
        dim: fc.array(
          fc.record({
            size: fc.oneof(fc.integer({ min: -2, max: 8 }), fc.constantFrom(2 ** 31, 2 ** 33)).map(String),
          }),
          { maxLength: 4 },
        ),
      }),
      float_val: fc.array(fc.float(), { maxLength: 6 }),
      int_val: fc.array(fc.integer(), { maxLength: 6 }),
      string_val: fc.array(bytes, { maxLength: 3 }),
      uint64_val: fc.array(fc.bigInt({ min: 0n, max: 1000n }).map(String), { maxLength: 2 }),
      tensor_content: bytes,
    },
    { requiredKeys: [] },
  );
  const predict = fc.record(
    {
      model_spec: fc.record(
        {
          name: fc.constantFrom(...MODEL_NAMES),
          signature_name: fc.constantFrom("", "serving_default", "x"),
        },
        { requiredKeys: [] },
      ),
      inputs: fc.dictionary(fc.constantFrom(...NAMES, "sequence_id", "sequence_control_input"), tensorProto, {
        maxKeys: 3,
      }),
    },
    { requiredKeys: [] },
  );
  await fc.assert(
    fc.asyncProperty(
      batchOf(
        fc.oneof(
          predict.map((m) => Buffer.from(predictType.encode(predictType.fromObject(m)).finish())),
          bytes.map(Buffer.from),
        ),
      ),
      async (batch) => {
        await Promise.all(batch.map((message) => grpcCall(PREDICTION_SERVICE_NAME, "Predict", message)));
      },
    ),
    settings(7),
  );

  // SageMaker: session and model headers, content types, bodies.
  await fc.assert(
    fc.asyncProperty(
      batchOf(
        fc.tuple(
          fc.oneof(
            fc.constantFrom(undefined, "NEW_SESSION", "0b0b0b0b-0000-4000-8000-000000000000"),
            fc.string({ maxLength: 20 }),
            fc.constant("x".repeat(300)),
          ),
          fc.constantFrom(undefined, "acc", "floats", "strings", "nope", "acc.tar.gz", ""),
          contentType,
          fc.constantFrom(undefined, "application/json", "application/octet-stream", "text/csv", "*/*"),
          fc.oneof(
            kserveBody.map((b) => JSON.stringify(b) ?? ""),
            fc.constant('{"requestType":"NEW_SESSION"}'),
            fc.constant('{"requestType":"CLOSE"}'),
            bytes.map(Buffer.from),
          ),
        ),
      ),
      async (batch) => {
        await Promise.all(
          batch.map(([session, target, type, accept, body]) =>
            http(sagemakerPort, "POST", "/invocations", body, {
              "x-amzn-sagemaker-session-id": session?.replace(/[^\x20-\x7e]/g, "?"),
              "x-amzn-sagemaker-target-model": target,
              "content-type": type,
              accept,
            }),
          ),
        );
      },
    ),
    settings(8),
  );

  await oracle.stop();
  const heapAfter = heapAfterGc();

  assert.ok(sent >= 10_000, `only ${sent} malformed requests were sent`);
  assert.deepEqual(failures, [], "answers that were not clean refusals");
  assert.deepEqual(oracle.mismatches, [], "sequences beside the fuzzing went wrong");
  assert.ok(oracle.steps > 100, `the sequences beside the fuzzing made only ${oracle.steps} steps`);
  assert.equal((await fetch(`${server.url}/v2/health/ready`)).status, 200);
  const growth = heapAfter - heapBefore;
  assert.ok(growth < 48 * 1024 * 1024, `the heap grew by ${Math.round(growth / 1024 / 1024)} MiB`);
  console.log(
    `fuzz: ${sent} malformed requests, ${oracle.steps} exact sequence steps beside them, heap ${Math.round(growth / 1024)} KiB`,
  );
});
