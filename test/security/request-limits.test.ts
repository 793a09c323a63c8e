import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { gzipSync } from "node:zlib";
import { securityOptions } from "../../src/config/security-options.ts";
import { MAX_BYTES_ELEMENTS } from "../../src/core/tensor-size.ts";
import { accumulatorModel } from "../../tools/onnx/sequence-models.ts";
import { addSubModel, identityModel } from "../../tools/onnx/test-models.ts";
import { TestClient } from "../grpc/support/grpc-harness.ts";
import { getJson, infer, inferBinary, outputData, postJson } from "../support/http-client.ts";
import { accumulatorConfig, metricValue } from "../support/sequence-kit.ts";
import { startTestServer, type TestServer } from "../support/test-server.ts";
import { TfsClient } from "../tfs/support/tfs-client.ts";
import { identityConfig } from "./support/identity-config.ts";

// Regression tests for what a client could make the server allocate or keep, and for the
// answers it got: shapes of 2^32 elements and more (refused with a message naming the
// input, before any allocation), string sequence ids of any length, instance counts
// without bound in a load request or a config file, BYTES tensors of any number of
// elements (each an object of its own), and load failures answered with
// statuses that depended on their cause.

const FLOATS = identityConfig("floats", "TYPE_FP32", "[ -1, -1 ]");
const STRINGS = identityConfig("strings", "TYPE_STRING", "[ -1, -1 ]");
const TOO_MANY_INSTANCES = identityConfig(
  "crowd",
  "TYPE_FP32",
  "[ -1, -1 ]",
  "instance_group [ { count: 100000 kind: KIND_CPU } ]",
);

const ADD_SUB = `
name: "add_sub"
backend: "onnxruntime"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ -1 ] }, { name: "INPUT1" data_type: TYPE_INT32 dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ -1 ] }, { name: "OUTPUT1" data_type: TYPE_INT32 dims: [ -1 ] } ]
`;

const HUGE_SHAPES = [
  [1, 2 ** 32],
  [2 ** 16, 2 ** 16],
  [1, 2 ** 31],
];

let server: TestServer;
let grpc: TestClient;
before(async () => {
  server = await startTestServer(
    {
      floats: { config: FLOATS, onnx: identityModel("FP32", [-1, -1]) },
      strings: { config: STRINGS, onnx: identityModel("BYTES", [-1, -1]) },
      acc: {
        config: accumulatorConfig("acc", 4, "oldest { max_candidate_sequences: 8 }"),
        onnx: accumulatorModel(),
      },
      crowd: { config: TOO_MANY_INSTANCES, onnx: identityModel("FP32", [-1, -1]) },
      add_sub: { config: ADD_SUB, onnx: addSubModel("INT32", [-1]) },
    },
    {
      modelControlMode: "explicit",
      loadModels: ["*"],
      // "crowd" fails to load: the others are served.
      exitOnError: false,
      security: securityOptions({ limits: { ...securityOptions().limits, maxSequenceIdBytes: 64 } }),
    },
  );
  grpc = new TestClient(server.grpcPort);
});
after(async () => {
  grpc.close();
  await server.stop();
});

describe("a shape is checked before anything is allocated for it", () => {
  for (const shape of HUGE_SHAPES) {
    test(`HTTP JSON, shape [${shape}]`, async () => {
      const answer = await infer(server.url, "floats", [
        { name: "INPUT0", datatype: "FP32", shape, data: [1, 2, 3] },
      ]);
      assert.equal(answer.status, 400, JSON.stringify(answer.body));
      assert.match(String(answer.body.error), /INPUT0/);
    });
    test(`HTTP binary, shape [${shape}]`, async () => {
      const answer = await inferBinary(server.url, "floats", [
        { name: "INPUT0", datatype: "FP32", shape, data: new Float32Array(4) },
      ]);
      assert.equal(answer.status, 400);
      assert.match(String(answer.error), /INPUT0/);
    });
    test(`HTTP binary BYTES, shape [${shape}]`, async () => {
      const answer = await inferBinary(server.url, "strings", [
        { name: "INPUT0", datatype: "BYTES", shape, data: new Uint8Array([1, 0, 0, 0, 97]) },
      ]);
      assert.equal(answer.status, 400);
      assert.match(String(answer.error), /INPUT0/);
    });
    test(`gRPC raw and typed contents, shape [${shape}]`, async () => {
      for (const input of [
        { raw_input_contents: [Buffer.alloc(16)], inputs: [{ name: "INPUT0", datatype: "FP32", shape }] },
        { inputs: [{ name: "INPUT0", datatype: "FP32", shape, contents: { fp32_contents: [1, 2] } }] },
        {
          inputs: [
            { name: "INPUT0", datatype: "BYTES", shape, contents: { bytes_contents: [Buffer.from("a")] } },
          ],
        },
      ]) {
        await assert.rejects(
          grpc.unary("ModelInfer", { model_name: "floats", ...input }),
          (error: Error & { code: number }) => {
            assert.equal(error.code, 3, error.message);
            assert.match(error.message, /INPUT0/);
            return true;
          },
        );
      }
    });
    test(`TF-Serving gRPC, one value filling shape [${shape}]`, async () => {
      const tfs = new TfsClient(server.grpcPort);
      try {
        await assert.rejects(
          tfs.predict({
            model_spec: { name: "floats" },
            inputs: {
              INPUT0: {
                dtype: "DT_FLOAT",
                tensor_shape: { dim: shape.map((size) => ({ size })) },
                float_val: [1],
              },
            },
          }),
          (error: Error & { code: number }) => {
            assert.equal(error.code, 3, error.message);
            assert.match(error.message, /INPUT0/);
            return true;
          },
        );
      } finally {
        tfs.close();
      }
    });
  }

  test("TF-Serving gRPC, one long string filling its shape, is counted with the string's length", async () => {
    const tfs = new TfsClient(server.grpcPort);
    try {
      const fill = (count: number) =>
        tfs.predict({
          model_spec: { name: "strings" },
          inputs: {
            INPUT0: {
              dtype: "DT_STRING",
              tensor_shape: { dim: [{ size: 1 }, { size: count }] },
              string_val: [Buffer.alloc(64 * 1024, "a")],
            },
          },
        });
      // 2048 copies of 64 KiB: 128 MiB from a 64 KiB message, past the 64 MiB default.
      await assert.rejects(fill(2048), (error: Error & { code: number }) => {
        assert.equal(error.code, 3, error.message);
        assert.match(
          error.message,
          /input 'INPUT0' fills shape \[1,2048\] from one value: \d+ bytes of BYTES/,
        );
        return true;
      });
      // A few copies are served.
      const served = await fill(3);
      assert.equal((served.outputs.OUTPUT0?.string_val as unknown[] | undefined)?.length, 3);
    } finally {
      tfs.close();
    }
  });

  test("TF-Serving gRPC, fills are counted for the whole request, and unknown inputs are refused before any is read", async () => {
    const tfs = new TfsClient(server.grpcPort);
    const filled = (count: number) => ({
      dtype: "DT_DOUBLE",
      tensor_shape: { dim: [{ size: count }] },
      double_val: [1],
    });
    try {
      // 20 inputs of 64 MiB each from one value, in a request of a kilobyte: none is
      // expanded, since the model has no input of those names.
      const junk = Object.fromEntries(Array.from({ length: 20 }, (_, i) => [`junk${i}`, filled(8 << 20)]));
      await assert.rejects(
        tfs.predict({ model_spec: { name: "floats" }, inputs: junk }),
        (error: Error & { code: number }) => {
          assert.equal(error.code, 3, error.message);
          assert.match(error.message, /unexpected inference input 'junk0' for model 'floats'/);
          return true;
        },
      );
      // Two fills of 40 MiB each pass the 64 MiB a request may expand to together.
      const ints = { dtype: "DT_INT32", tensor_shape: { dim: [{ size: 10 << 20 }] }, int_val: [1] };
      await assert.rejects(
        tfs.predict({ model_spec: { name: "add_sub" }, inputs: { INPUT0: ints, INPUT1: ints } }),
        (error: Error & { code: number }) => {
          assert.equal(error.code, 3, error.message);
          assert.match(
            error.message,
            /input 'INPUT1' fills shape \[10485760\] from one value: 41943040 bytes of INT32, more than the 25165824 bytes the request's inputs may still expand to/,
          );
          return true;
        },
      );
    } finally {
      tfs.close();
    }
  });

  test("TF-Serving REST, lists nested 300 deep, is refused with 400 naming the input; JSON nested a million deep, before it is parsed", async () => {
    const deep = (depth: number) => `${"[".repeat(depth)}1${"]".repeat(depth)}`;
    const predict = (body: string) =>
      fetch(`${server.url}/v1/models/floats:predict`, { method: "POST", body });
    const response = await predict(`{"inputs": {"INPUT0": ${deep(300)}}}`);
    assert.equal(response.status, 400);
    assert.match(
      ((await response.json()) as { error: string }).error,
      /input 'INPUT0' nests its lists 300 deep: a tensor has at most 254 dimensions/,
    );
    // 2 MB of JSON, 4 KB gzipped: parsed, it held the server for seconds and GBs.
    const bomb = await fetch(`${server.url}/v1/models/floats:predict`, {
      method: "POST",
      headers: { "content-encoding": "gzip" },
      body: gzipSync(`{"inputs": {"INPUT0": ${deep(1_000_000)}}}`),
    });
    assert.equal(bomb.status, 400);
    assert.deepEqual(await bomb.json(), {
      error: "the request JSON nests arrays and objects more than 512 levels deep; no tensor needs that many",
    });
  });

  test("the server still answers, and a shape that fits still works", async () => {
    const answer = await infer(server.url, "floats", [
      { name: "INPUT0", datatype: "FP32", shape: [1, 3], data: [1, 2, 3] },
    ]);
    assert.deepEqual(outputData(answer, "OUTPUT0"), [1, 2, 3]);
  });
});

describe("BYTES tensors are bounded in elements, each held as an object of its own", () => {
  const tooMany = MAX_BYTES_ELEMENTS + 1;
  /** `count` empty BYTES elements: a 4-byte length prefix each. */
  const emptyStrings = (count: number) => new Uint8Array(4 * count);
  const refused = (message: string) =>
    assert.match(
      message,
      new RegExp(`INPUT0.*${tooMany} BYTES elements: more than the ${MAX_BYTES_ELEMENTS}`),
    );

  test("HTTP binary and JSON, gRPC raw and typed contents, TF-Serving REST: refused, naming the input", async () => {
    const binary = await inferBinary(server.url, "strings", [
      { name: "INPUT0", datatype: "BYTES", shape: [1, tooMany], data: emptyStrings(tooMany) },
    ]);
    assert.equal(binary.status, 400);
    refused(String(binary.error));
    const json = await infer(server.url, "strings", [
      { name: "INPUT0", datatype: "BYTES", shape: [1, tooMany], data: new Array(tooMany).fill("") },
    ]);
    assert.equal(json.status, 400);
    refused(String(json.body.error));
    for (const input of [
      {
        raw_input_contents: [Buffer.from(emptyStrings(tooMany))],
        inputs: [{ name: "INPUT0", datatype: "BYTES", shape: [1, tooMany] }],
      },
      {
        inputs: [
          {
            name: "INPUT0",
            datatype: "BYTES",
            shape: [1, tooMany],
            contents: { bytes_contents: new Array(tooMany).fill(Buffer.alloc(0)) },
          },
        ],
      },
    ]) {
      await assert.rejects(
        grpc.unary("ModelInfer", { model_name: "strings", ...input }),
        (error: Error & { code: number }) => {
          assert.equal(error.code, 3, error.message);
          refused(error.message);
          return true;
        },
      );
    }
    const rest = await postJson(`${server.url}/v1/models/strings:predict`, {
      inputs: { INPUT0: [new Array(tooMany).fill("")] },
    });
    assert.equal(rest.status, 400, JSON.stringify(rest.body).slice(0, 200));
    refused(String(rest.body.error));
  });

  test("a tensor at the bound is served", async () => {
    const answer = await inferBinary(server.url, "strings", [
      {
        name: "INPUT0",
        datatype: "BYTES",
        shape: [1, MAX_BYTES_ELEMENTS],
        data: emptyStrings(MAX_BYTES_ELEMENTS),
      },
    ]);
    assert.equal(answer.status, 200, answer.error);
    assert.equal(answer.outputs.get("OUTPUT0")?.length, 4 * MAX_BYTES_ELEMENTS);
  });
});

describe("string sequence ids are bounded in bytes", () => {
  test("an id over --max-sequence-id-bytes is refused over HTTP and gRPC; one at the limit works", async () => {
    const long = "x".repeat(65);
    const answer = await infer(
      server.url,
      "acc",
      [{ name: "INPUT", datatype: "INT32", shape: [1, 1], data: [1] }],
      {
        id: long,
        start: true,
      },
    );
    assert.equal(answer.status, 400);
    assert.match(String(answer.body.error), /65 bytes long, more than the 64 bytes allowed/);
    await assert.rejects(
      grpc.unary("ModelInfer", {
        model_name: "acc",
        parameters: { sequence_id: { string_param: "é".repeat(33) }, sequence_start: { bool_param: true } },
        inputs: [{ name: "INPUT", datatype: "INT32", shape: [1, 1] }],
        raw_input_contents: [Buffer.from(new Int32Array([1]).buffer)],
      }),
      /66 bytes long/,
    );
    const fits = "y".repeat(64);
    const ok = await infer(
      server.url,
      "acc",
      [{ name: "INPUT", datatype: "INT32", shape: [1, 1], data: [4] }],
      { id: fits, start: true, end: true },
    );
    assert.deepEqual(outputData(ok, "OUTPUT"), [4]);
    const listing = await getJson(`${server.url}/v2/models/acc/sequences`);
    assert.equal(listing.status, 200);
    assert.equal(
      await metricValue(server.metricsUrl, "seqserve_limit_refusals_total", { limit: "sequence_id_bytes" }),
      2,
    );
  });
});

describe("instances per model are bounded", () => {
  test("a config file asking for 100000 instances fails to load with the reason; the server serves on", async () => {
    const index = await postJson(`${server.url}/v2/repository/index`, {});
    const crowd = (index.body as unknown as { name: string; state: string; reason: string }[]).find(
      (m) => m.name === "crowd",
    );
    assert.equal(crowd?.state, "UNAVAILABLE");
    assert.match(crowd?.reason ?? "", /100000 instances .* more than the 64 .*--max-instances-per-model/);
  });

  test("a load request whose config asks for 100000 instances is refused with 400 before any thread starts", async () => {
    const config = JSON.stringify({
      name: "floats",
      backend: "onnxruntime",
      max_batch_size: 0,
      input: [{ name: "INPUT0", data_type: "TYPE_FP32", dims: [-1, -1] }],
      output: [{ name: "OUTPUT0", data_type: "TYPE_FP32", dims: [-1, -1] }],
      instance_group: [{ count: 100000, kind: "KIND_CPU" }],
    });
    const answer = await postJson(`${server.url}/v2/repository/models/floats/load`, {
      parameters: { config },
    });
    assert.equal(answer.status, 400);
    assert.match(String(answer.body.error), /100000 instances/);
    await assert.rejects(
      grpc.unary("RepositoryModelLoad", {
        model_name: "floats",
        parameters: { config: { string_param: config } },
      }),
      (error: Error & { code: number }) => error.code === 3 && /100000 instances/.test(error.message),
    );
    // The loaded version still serves.
    const still = await infer(server.url, "floats", [
      { name: "INPUT0", datatype: "FP32", shape: [1, 1], data: [7] },
    ]);
    assert.deepEqual(outputData(still, "OUTPUT0"), [7]);
    assert.ok(
      (await metricValue(server.metricsUrl, "seqserve_limit_refusals_total", {
        limit: "instances_per_model",
      }))! >= 3,
    );
  });
});

describe("a failed load is answered 400, as Triton answers it, whatever the cause", () => {
  test("a missing model file is 400; a model no repository has, or a config that does not parse, is 500 (as Triton)", async () => {
    const unknown = await postJson(`${server.url}/v2/repository/models/nosuch/load`, {});
    assert.equal(unknown.status, 500);
    assert.match(String(unknown.body.error), /failed to load 'nosuch', failed to poll from model repository/);
    const bad = await postJson(`${server.url}/v2/repository/models/floats/load`, {
      parameters: { config: "{not json" },
    });
    // Triton's failed poll ("Invalid config override" in its log).
    assert.equal(bad.status, 500);
    assert.match(String(bad.body.error), /failed to poll from model repository: Invalid config override: /);
    const wrongFile = await postJson(`${server.url}/v2/repository/models/floats/load`, {
      parameters: {
        config: JSON.stringify({
          name: "floats",
          backend: "onnxruntime",
          default_model_filename: "absent.onnx",
        }),
      },
    });
    assert.equal(wrongFile.status, 400);
    assert.match(String(wrongFile.body.error), /absent\.onnx/);
    await assert.rejects(
      grpc.unary("RepositoryModelLoad", { model_name: "nosuch" }),
      (error: Error & { code: number }) => error.code === 13,
    );
  });
});
