import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import type { DataType } from "../../src/core/datatype.ts";
import { identityModel, ONNX_RUNTIME_DATATYPES } from "../../tools/onnx/test-models.ts";
import { getJson, infer, inferBinary, outputData, postJson } from "../support/http-client.ts";
import { startTestServer, type TestServer } from "../support/test-server.ts";
import { errorOf } from "./support/serving.ts";

// Every datatype ONNX Runtime can take from Node.js goes through a real identity model
// (OUTPUT0 = INPUT0, [-1, 4]) and comes back unchanged: in JSON where KServe allows it,
// and as binary tensor data for all. BF16 cannot reach ONNX Runtime from Node.js at all
// (its JavaScript API has no bfloat16 tensor): such a model is refused at load, visibly,
// while the server goes on serving the rest.

const SHAPE = [2, 4];

/** Eight JSON values of each datatype, extremes included (64-bit integers within ±2^53: JSON numbers are doubles). */
const JSON_VALUES: Readonly<Record<Exclude<DataType, "FP16" | "BF16">, readonly unknown[]>> = {
  BOOL: [true, false, false, true, true, true, false, false],
  UINT8: [0, 255, 1, 128, 127, 2, 254, 9],
  UINT16: [0, 65535, 1, 32768, 32767, 256, 65534, 9],
  UINT32: [0, 4294967295, 1, 2147483648, 2147483647, 65536, 4294967294, 9],
  UINT64: [0, 2 ** 53 - 1, 1, 2 ** 32, 2 ** 53 - 2, 4294967295, 12345678901234, 9],
  INT8: [-128, 127, 0, -1, 1, 64, -64, 9],
  INT16: [-32768, 32767, 0, -1, 1, 256, -256, 9],
  INT32: [-2147483648, 2147483647, 0, -1, 1, 65536, -65536, 9],
  INT64: [-(2 ** 53 - 1), 2 ** 53 - 1, 0, -1, 1, 2 ** 40, -(2 ** 40), 9],
  // Come back as the float32 nearest each (0.1 as 0.10000000149011612, as Triton writes it).
  FP32: [
    0.1, -3.4028234663852886e38, 1.401298464324817e-45, 1.1754943508222875e-38, 16777216, -1.5, 0, 65504,
  ],
  FP64: [0.1, Math.PI, 1.7976931348623157e308, 5e-324, -2.5, 1e-300, 123456789.12345679, -1],
  BYTES: [
    "",
    "hello",
    "ünïcødé ✓",
    "emoji 🎉",
    'quote " and \\ backslash',
    "tab\tnewline\n",
    "x".repeat(1000),
    "0",
  ],
};

const utf8 = new TextEncoder();

/** BYTES elements as the binary extension carries them: a 4-byte little-endian length, then the bytes. */
function bytesTensor(elements: readonly string[]): Uint8Array {
  const parts = elements.map((element) => {
    const bytes = utf8.encode(element);
    const part = new Uint8Array(4 + bytes.byteLength);
    new DataView(part.buffer).setUint32(0, bytes.byteLength, true);
    part.set(bytes, 4);
    return part;
  });
  return Buffer.concat(parts);
}

/** Eight binary values of each datatype, including what JSON cannot carry (NaN, ±∞, -0, full 64-bit range). */
const BINARY_VALUES: Readonly<Record<Exclude<DataType, "BF16">, ArrayBufferView>> = {
  BOOL: new Uint8Array([1, 0, 0, 1, 1, 1, 0, 0]),
  UINT8: new Uint8Array([0, 255, 1, 128, 127, 2, 254, 9]),
  UINT16: new Uint16Array([0, 65535, 1, 32768, 32767, 256, 65534, 9]),
  UINT32: new Uint32Array([0, 4294967295, 1, 2147483648, 2147483647, 65536, 4294967294, 9]),
  UINT64: new BigUint64Array([
    0n,
    2n ** 64n - 1n,
    1n,
    2n ** 63n,
    2n ** 53n + 1n,
    2n ** 32n,
    18446744073709551614n,
    9n,
  ]),
  INT8: new Int8Array([-128, 127, 0, -1, 1, 64, -64, 9]),
  INT16: new Int16Array([-32768, 32767, 0, -1, 1, 256, -256, 9]),
  INT32: new Int32Array([-2147483648, 2147483647, 0, -1, 1, 65536, -65536, 9]),
  INT64: new BigInt64Array([
    -(2n ** 63n),
    2n ** 63n - 1n,
    0n,
    -1n,
    1n,
    2n ** 53n + 1n,
    -(2n ** 53n + 1n),
    9n,
  ]),
  // Bit patterns: 1, -0, +∞, -∞, NaN, the smallest subnormal, the largest finite, -2.
  FP16: new Uint16Array([0x3c00, 0x8000, 0x7c00, 0xfc00, 0x7e00, 0x0001, 0x7bff, 0xc000]),
  FP32: new Float32Array([
    0.1,
    -0,
    Number.POSITIVE_INFINITY,
    Number.NEGATIVE_INFINITY,
    Number.NaN,
    1.401298464324817e-45,
    3.4028234663852886e38,
    -1.5,
  ]),
  FP64: new Float64Array([
    0.1,
    -0,
    Number.POSITIVE_INFINITY,
    Number.NEGATIVE_INFINITY,
    Number.NaN,
    5e-324,
    Number.MAX_VALUE,
    Math.PI,
  ]),
  BYTES: bytesTensor(JSON_VALUES.BYTES as string[]),
};

const modelName = (datatype: DataType) => `id_${datatype.toLowerCase()}`;

const BF16_CONFIG = `
name: "bf16_config"
backend: "onnxruntime"
max_batch_size: 4
input [ { name: "INPUT0" data_type: TYPE_BF16 dims: [ 4 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_BF16 dims: [ 4 ] } ]
`;

let server: TestServer;
before(async () => {
  server = await startTestServer(
    {
      ...Object.fromEntries(
        ONNX_RUNTIME_DATATYPES.map((d) => [modelName(d), { onnx: identityModel(d, [-1, 4]) }]),
      ),
      // A BF16 model completed from the ONNX file, and one whose config.pbtxt declares TYPE_BF16.
      bf16_auto: { onnx: identityModel("BF16", [-1, 4]) },
      bf16_config: { config: BF16_CONFIG, onnx: identityModel("BF16", [-1, 4]) },
    },
    { exitOnError: false },
  );
});
after(() => server.stop());

describe("JSON tensors round-trip through real ONNX identity models", () => {
  for (const [datatype, values] of Object.entries(JSON_VALUES) as [DataType, unknown[]][]) {
    it(datatype, async () => {
      const answer = await infer(server.url, modelName(datatype), [
        { name: "INPUT0", datatype, shape: SHAPE, data: values },
      ]);
      assert.equal(answer.status, 200, JSON.stringify(answer.body));
      const [output] = answer.body.outputs as { name: string; datatype: string; shape: number[] }[];
      assert.deepEqual([output?.name, output?.datatype, output?.shape], ["OUTPUT0", datatype, SHAPE]);
      const expected = datatype === "FP32" ? (values as number[]).map(Math.fround) : values;
      assert.deepEqual(outputData(answer, "OUTPUT0"), expected);
    });
  }

  it("-0 keeps its sign through JSON both ways (FP32, FP64)", async () => {
    for (const datatype of ["FP32", "FP64"]) {
      // JSON.stringify would write -0 as 0: the body is written by hand.
      const answer = await postJson(
        `${server.url}/v2/models/${modelName(datatype as DataType)}/infer`,
        `{"inputs":[{"name":"INPUT0","datatype":"${datatype}","shape":[2,4],"data":[-0,0,-0,1,-1,-0,0,0]}]}`,
      );
      const data = outputData(answer, "OUTPUT0") as number[];
      assert.deepEqual(
        data.map((v) => Object.is(v, -0)),
        [true, false, true, false, false, true, false, false],
        datatype,
      );
    }
  });

  it("nested (row-major) data reads the same as flat data", async () => {
    const nested = [
      [1, 2, 3, 4],
      [5, 6, 7, 8],
    ];
    const answer = await infer(server.url, "id_int16", [
      { name: "INPUT0", datatype: "INT16", shape: SHAPE, data: nested },
    ]);
    assert.deepEqual(outputData(answer, "OUTPUT0"), nested.flat());
  });
});

describe("binary tensors round-trip byte for byte through real ONNX identity models", () => {
  for (const [datatype, data] of Object.entries(BINARY_VALUES) as [DataType, ArrayBufferView][]) {
    it(datatype, async () => {
      const answer = await inferBinary(server.url, modelName(datatype), [
        { name: "INPUT0", datatype, shape: SHAPE, data },
      ]);
      assert.equal(answer.status, 200, answer.error);
      const [output] = answer.header.outputs as { name: string; datatype: string; shape: number[] }[];
      assert.deepEqual([output?.name, output?.datatype, output?.shape], ["OUTPUT0", datatype, SHAPE]);
      const sent = Buffer.from(data.buffer, data.byteOffset, data.byteLength);
      assert.equal(answer.outputs.get("OUTPUT0")?.toString("hex"), sent.toString("hex"));
    });
  }

  // ONNX Runtime's Node.js API takes string tensors as JavaScript strings, so BYTES elements
  // that are not UTF-8 cannot arrive exactly: they must then be refused, not altered.
  it("BYTES elements that are not UTF-8 come back exactly or are refused, never altered", async () => {
    const element = Buffer.from([0xff, 0xfe, 0x41]);
    const data = Buffer.concat([
      Buffer.from([3, 0, 0, 0]),
      element,
      ...Array(7).fill(Buffer.from([0, 0, 0, 0])),
    ]);
    const answer = await inferBinary(server.url, "id_bytes", [
      { name: "INPUT0", datatype: "BYTES", shape: SHAPE, data },
    ]);
    if (answer.status === 200)
      assert.equal(answer.outputs.get("OUTPUT0")?.toString("hex"), data.toString("hex"));
    else {
      assert.equal(answer.status, 400);
      assert.match(answer.error ?? "", /INPUT0/);
    }
  });
});

describe("FP16 is binary-only", () => {
  it("FP16 data in JSON is refused with Triton's message, and the server goes on", async () => {
    const answer = await infer(server.url, "id_fp16", [
      { name: "INPUT0", datatype: "FP16", shape: SHAPE, data: [1, 2, 3, 4, 5, 6, 7, 8] },
    ]);
    assert.equal(answer.status, 400);
    assert.equal(
      errorOf(answer),
      "receiving FP16 data via JSON is not supported. Please use the binary data format for input INPUT0",
    );
    const good = await inferBinary(server.url, "id_fp16", [
      { name: "INPUT0", datatype: "FP16", shape: SHAPE, data: BINARY_VALUES.FP16 },
    ]);
    assert.equal(good.status, 200, good.error);
  });

  it("an FP16 output asked for in JSON is refused before the model runs", async () => {
    const header = JSON.stringify({
      inputs: [{ name: "INPUT0", datatype: "FP16", shape: SHAPE, parameters: { binary_data_size: 16 } }],
    });
    const response = await fetch(`${server.url}/v2/models/id_fp16/infer`, {
      method: "POST",
      headers: { "inference-header-content-length": String(Buffer.byteLength(header)) },
      body: Buffer.concat([Buffer.from(header), Buffer.from(BINARY_VALUES.FP16.buffer)]),
    });
    assert.equal(response.status, 400);
    assert.equal(
      errorOf({ text: await response.text() }),
      "sending FP16 data via JSON is not supported. Please use the binary data format for output",
    );
  });
});

describe("BF16 cannot reach ONNX Runtime from Node.js", () => {
  it("a model with a BF16 input is refused at load, its reason in the repository index", async () => {
    const index = await postJson(`${server.url}/v2/repository/index`, {});
    assert.equal(index.status, 200);
    const entries = index.body as unknown as {
      name: string;
      version?: string;
      state: string;
      reason: string;
    }[];
    for (const name of ["bf16_auto", "bf16_config"]) {
      const entry = entries.find((e) => e.name === name);
      assert.ok(entry !== undefined, name);
      assert.equal(entry.state, "UNAVAILABLE", name);
      // The version the load tried, as Triton's index keeps each version's state.
      assert.equal(entry.version, "1");
      assert.match(
        entry.reason,
        new RegExp(
          `input 'INPUT0' of model '${name}' has type bfloat16, which ONNX Runtime's Node.js API cannot feed or fetch`,
        ),
      );
    }
    // The config.pbtxt case names the file and line of the input.
    assert.match(
      entries.find((e) => e.name === "bf16_config")!.reason,
      /bf16_config[/\\]config\.pbtxt:\d+:\d+: /,
    );
  });

  it("the refused model is not ready and not served; the server reports not-ready", async () => {
    const ready = await getJson(`${server.url}/v2/models/bf16_config/ready`);
    assert.equal(ready.status, 400);
    const inferAnswer = await infer(server.url, "bf16_config", [
      { name: "INPUT0", datatype: "FP32", shape: [1, 4], data: [1, 2, 3, 4] },
    ]);
    assert.equal(inferAnswer.status, 404);
    assert.equal(errorOf(inferAnswer), "Request for unknown model: 'bf16_config' has no available versions");
    const health = await fetch(`${server.url}/v2/health/ready`);
    assert.equal(health.status, 400);
    assert.equal(errorOf({ text: await health.text() }), "server is not ready");
    assert.equal((await fetch(`${server.url}/v2/health/live`)).status, 200);
  });

  it("every other model keeps serving", async () => {
    const index = (await postJson(`${server.url}/v2/repository/index`, { ready: true })).body as unknown as {
      name: string;
      state: string;
    }[];
    assert.deepEqual(index.map((e) => e.name).sort(), ONNX_RUNTIME_DATATYPES.map(modelName).sort());
    assert.ok(index.every((e) => e.state === "READY"));
    const answer = await infer(server.url, "id_fp32", [
      { name: "INPUT0", datatype: "FP32", shape: [1, 4], data: [1, 2, 3, 4] },
    ]);
    assert.deepEqual(outputData(answer, "OUTPUT0"), [1, 2, 3, 4]);
  });
});
