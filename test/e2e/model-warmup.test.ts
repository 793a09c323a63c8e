import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { OnnxModelBuilder } from "../../tools/onnx/onnx-model-builder.ts";
import { identityModel } from "../../tools/onnx/test-models.ts";
import { type LogLine, memoryLogger } from "../security/support/memory-logger.ts";
import { getJson, postJson } from "../support/http-client.ts";
import { type TempRepository, tempRepository } from "../support/model-repository.ts";
import { startTestServer, type TestServer } from "../support/test-server.ts";

// Triton's model_warmup: each sample runs on every instance before the model is ready,
// `count` times, as one batch of `batch_size` rows of zeros, random values or a file's
// values (from the model's warmup/ folder); a sample that fails fails the load with
// Triton's message, and a sample Triton could not prepare is refused the same way.

/** VALUE = TABLE[INDEX], TABLE = [0..9]: an INDEX outside 0..9 makes the run fail. */
function lookupModel(): Uint8Array {
  return new OnnxModelBuilder({ opset: 17 })
    .input("INDEX", "INT64", ["batch", 1])
    .output("VALUE", "FP32", ["batch", 1])
    .initializer("table", "FP32", [10], new Float32Array([0, 1, 2, 3, 4, 5, 6, 7, 8, 9]))
    .node("Gather", ["table", "INDEX"], ["VALUE"], { axis: 0 })
    .toBytes();
}

const int64File = (value: bigint): Uint8Array => new Uint8Array(BigInt64Array.of(value).buffer);

const lookupConfig = (name: string, warmup: string, maxBatchSize = 4) => `
name: "${name}"
backend: "onnxruntime"
max_batch_size: ${maxBatchSize}
input [ { name: "INDEX" data_type: TYPE_INT64 dims: [ 1 ] } ]
output [ { name: "VALUE" data_type: TYPE_FP32 dims: [ 1 ] } ]
model_warmup [ ${warmup} ]
`;

const sample = (name: string, batch: number, data: string, extra = "") =>
  `{ name: "${name}" batch_size: ${batch} ${extra} inputs { key: "INDEX" value: { data_type: TYPE_INT64 dims: [ 1 ] ${data} } } }`;

const WARM_CONFIG = `
name: "warm"
backend: "onnxruntime"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
instance_group [ { count: 2 kind: KIND_CPU } ]
model_warmup [
  { name: "zeros" batch_size: 2 count: 3 inputs { key: "INPUT0" value: { data_type: TYPE_FP32 dims: [ 4 ] zero_data: true } } },
  { name: "random" batch_size: 1 inputs { key: "INPUT0" value: { data_type: TYPE_FP32 dims: [ 4 ] random_data: true } } },
  { name: "from a file" batch_size: 8 inputs { key: "INPUT0" value: { data_type: TYPE_FP32 dims: [ 4 ] input_data_file: "row.bin" } } },
  { name: "skipped" batch_size: 0 inputs { key: "NOPE" value: { data_type: TYPE_FP32 dims: [ 4 ] zero_data: true } } }
]
`;

let repository: TempRepository;
let server: TestServer;
const lines: LogLine[] = [];
before(async () => {
  repository = tempRepository({
    warm: {
      config: WARM_CONFIG,
      onnx: identityModel("FP32", [-1, 4]),
      files: { "warmup/row.bin": new Uint8Array(new Float32Array([1, 2, 3, 4]).buffer) },
    },
    lookup_ok: {
      config: lookupConfig("lookup_ok", sample("in range", 4, 'input_data_file: "seven.bin"')),
      onnx: lookupModel(),
      files: { "warmup/seven.bin": int64File(7n) },
    },
    lookup_fails: {
      config: lookupConfig("lookup_fails", sample("out of range", 1, 'input_data_file: "fifty.bin"')),
      onnx: lookupModel(),
      files: { "warmup/fifty.bin": int64File(50n) },
    },
    short_file: {
      config: lookupConfig("short_file", sample("short", 1, 'input_data_file: "half.bin"')),
      onnx: lookupModel(),
      files: { "warmup/half.bin": new Uint8Array(4) },
    },
    variable_dims: {
      config: lookupConfig(
        "variable_dims",
        sample("variable", 1, "zero_data: true").replace("dims: [ 1 ]", "dims: [ -1 ]"),
      ),
      onnx: lookupModel(),
    },
    too_large_batch: {
      config: lookupConfig("too_large_batch", sample("large", 5, "zero_data: true")),
      onnx: lookupModel(),
    },
    too_large_sample: {
      config: lookupConfig(
        "too_large_sample",
        sample("huge", 4, "zero_data: true").replace("dims: [ 1 ]", "dims: [ 1000000000 ]"),
      ),
      onnx: lookupModel(),
    },
    no_data: {
      config: lookupConfig("no_data", sample("empty", 1, "")),
      onnx: lookupModel(),
    },
  });
  server = await startTestServer(
    repository.path,
    { modelControlMode: "explicit", loadModels: ["warm"] },
    memoryLogger(lines),
  );
});
after(async () => {
  await server?.stop();
  repository?.remove();
});

const load = (model: string) => postJson(`${server.url}/v2/repository/models/${model}/load`, {});

describe("model_warmup", () => {
  it("runs each sample on every instance before the model is ready; a batch_size 0 sample is skipped", async () => {
    assert.equal((await getJson(`${server.url}/v2/models/warm/ready`)).status, 200);
    const ran = lines
      .filter((line) => line.event === "warmup")
      .map((line) => `${line.instance} ${line.sample}`)
      .sort();
    assert.deepEqual(ran, [
      "warm_0 from a file",
      "warm_0 random",
      "warm_0 zeros",
      "warm_1 from a file",
      "warm_1 random",
      "warm_1 zeros",
    ]);
    // Warm-up runs are not requests: the statistics count none.
    const stats = (await getJson(`${server.url}/v2/models/warm/stats`)).body.model_stats as {
      inference_count: number;
    }[];
    assert.equal(stats[0]?.inference_count, 0);
  });

  it("gives the model the file's values: in range it loads, out of range the load fails as in Triton", async () => {
    assert.equal((await load("lookup_ok")).status, 200);
    const failed = await load("lookup_fails");
    assert.equal(failed.status, 400, JSON.stringify(failed.body));
    assert.match(
      failed.body.error as string,
      /^failed to run warmup sample 'out of range': .*idx=50 must be within/,
    );
    assert.equal((await getJson(`${server.url}/v2/models/lookup_fails/ready`)).status, 400);
  });

  it("refuses samples Triton cannot prepare, with Triton's messages", async () => {
    const cases: [string, RegExp][] = [
      [
        "short_file",
        /warmup setting expects 8 bytes, but the data provided from .*half\.bin only has 4 bytes/,
      ],
      [
        "variable_dims",
        /warmup setting expects all variable-size dimensions are specified for input 'INDEX'/,
      ],
      [
        "too_large_batch",
        /warmup sample 'large' has batch_size 5, more than the max_batch_size of model 'too_large_batch', 4/,
      ],
      ["no_data", /warmup setting expects input 'INDEX' to have input_data_type set/],
      // Refused before anything is allocated: 4 rows of 10^9 int64 values.
      [
        "too_large_sample",
        /warmup sample 'huge' would take 32000000000 bytes a run, more than the 67108864 a sample may/,
      ],
    ];
    for (const [model, message] of cases) {
      const answer = await load(model);
      assert.equal(answer.status, 400, model);
      assert.match(answer.body.error as string, message, model);
    }
  });
});
