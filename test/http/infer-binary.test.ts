import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import type { DataType } from "../../src/core/datatype.ts";
import type { ServedModel } from "../../src/core/model.ts";
import type { BytesElements, NumericTensor } from "../../src/core/tensor.ts";
import {
  decodeInferRequest,
  isBinaryOutput,
} from "../../src/frontends/common/kserve/infer-request-decoder.ts";
import { encodeRawTensor } from "../../src/frontends/common/raw-tensor.ts";
import { FakeModel, inputConfig } from "./support/fake-context.ts";
import {
  binaryRequest,
  bodyJson,
  type RawResponse,
  send,
  splitBinaryResponse,
  startServer,
  type TestServer,
} from "./support/http-server.ts";

type OutputJson = {
  name: string;
  datatype: string;
  shape: number[];
  data?: unknown[];
  parameters?: Record<string, unknown>;
};

const bytes = (...elements: string[]): BytesElements => elements.map((e) => new TextEncoder().encode(e));

const TENSORS: { datatype: DataType; data: NumericTensor["data"] | BytesElements }[] = [
  { datatype: "BOOL", data: new Uint8Array([1, 0, 1]) },
  { datatype: "UINT8", data: new Uint8Array([0, 128, 255]) },
  { datatype: "UINT16", data: new Uint16Array([0, 1, 65535]) },
  { datatype: "UINT32", data: new Uint32Array([0, 1, 4294967295]) },
  { datatype: "UINT64", data: new BigUint64Array([0n, 9007199254740993n, 18446744073709551615n]) },
  { datatype: "INT8", data: new Int8Array([-128, 0, 127]) },
  { datatype: "INT16", data: new Int16Array([-32768, 0, 32767]) },
  { datatype: "INT32", data: new Int32Array([-2147483648, 0, 2147483647]) },
  {
    datatype: "INT64",
    data: new BigInt64Array([-9223372036854775808n, 9007199254740993n, 9223372036854775807n]),
  },
  { datatype: "FP16", data: new Uint16Array([0x3c00, 0x8000, 0x7c00]) },
  { datatype: "FP32", data: new Float32Array([0.1, Number.NaN, Number.NEGATIVE_INFINITY]) },
  { datatype: "FP64", data: new Float64Array([0.1, -0, 1e308]) },
  { datatype: "BYTES", data: bytes("a", "", "\u0000\u00ff binary") },
  { datatype: "BF16", data: new Uint16Array([0x3f80, 0xbf80, 0x7fc0]) },
];

function rawOf(datatype: DataType, data: NumericTensor["data"] | BytesElements): Uint8Array {
  return encodeRawTensor({ datatype, shape: [3], data });
}

describe("inference with the binary tensor extension", () => {
  let server: TestServer;
  before(async () => {
    server = await startServer();
  });
  after(() => server.close());

  function postBinary(model: string, header: unknown, parts: Uint8Array[]): Promise<RawResponse> {
    const { body, headerLength } = binaryRequest(header, parts);
    return send(server, "POST", `/v2/models/${model}/infer`, body, {
      "content-type": "application/octet-stream",
      "inference-header-content-length": headerLength,
    });
  }

  async function refused(header: unknown, parts: Uint8Array[], message: string, headers = {}): Promise<void> {
    const { body, headerLength } = binaryRequest(header, parts);
    const response = await send(server, "POST", "/v2/models/echo/infer", body, {
      "inference-header-content-length": headerLength,
      ...headers,
    });
    assert.equal(response.status, 400, response.body.toString());
    assert.deepEqual(bodyJson(response), { error: message });
    const next = await postBinary(
      "echo",
      { inputs: [{ name: "A", datatype: "INT8", shape: [1], parameters: { binary_data_size: 1 } }] },
      [new Uint8Array([1])],
    );
    assert.equal(next.status, 200);
  }

  for (const { datatype, data } of TENSORS) {
    it(`${datatype} round-trips as binary data, byte for byte`, async () => {
      const raw = rawOf(datatype, data);
      const response = await postBinary(
        "echo",
        {
          parameters: { binary_data_output: true },
          inputs: [{ name: "IN", datatype, shape: [3], parameters: { binary_data_size: raw.byteLength } }],
        },
        [raw],
      );
      assert.equal(response.status, 200, response.body.toString());
      assert.equal(response.headers["content-type"], "application/octet-stream");
      const { json, binary } = splitBinaryResponse(response);
      assert.deepEqual(json.outputs, [
        { name: "IN", datatype, shape: [3], parameters: { binary_data_size: raw.byteLength } },
      ]);
      assert.deepEqual(new Uint8Array(binary), raw);
      const received = server.fake.registry.model("echo").requests.at(-1)?.inputs.get("IN");
      assert.equal(received?.datatype, datatype);
    });
  }

  it("binary inputs are views over the request body, not copies", async () => {
    const values = new Float32Array([1, 2, 3, 4]);
    const raw = new Uint8Array(values.buffer);
    // Pad the JSON so the tensor starts at an offset aligned for FP32.
    let header = JSON.stringify({
      inputs: [{ name: "V", datatype: "FP32", shape: [4], parameters: { binary_data_size: 16 } }],
    });
    header += " ".repeat((8 - (header.length % 8)) % 8);
    const body = Buffer.concat([Buffer.from(header), raw]);
    const response = await send(server, "POST", "/v2/models/echo/infer", body, {
      "inference-header-content-length": header.length,
    });
    assert.equal(response.status, 200);
    const tensor = server.fake.registry.model("echo").requests.at(-1)?.inputs.get("V") as NumericTensor;
    assert.deepEqual([...tensor.data], [1, 2, 3, 4]);
    assert.equal(tensor.data.byteOffset, header.length);
    assert.equal(tensor.data.buffer.byteLength, body.byteLength);
  });

  it("binary and JSON inputs mix; a listed output is binary only if it says so, whatever the request default (as Triton)", async () => {
    const raw = new Uint8Array(new Int32Array([7, 8]).buffer);
    const response = await postBinary(
      "echo",
      {
        parameters: { binary_data_output: true },
        inputs: [
          { name: "J", datatype: "INT32", shape: [1], data: [5] },
          { name: "B", datatype: "INT32", shape: [2], parameters: { binary_data_size: 8 } },
          { name: "F", datatype: "FP32", shape: [3], parameters: { binary_data_size: 12 } },
        ],
        outputs: [
          { name: "J" },
          { name: "B", parameters: { binary_data: true } },
          { name: "F", parameters: { binary_data: false } },
        ],
      },
      [raw, new Uint8Array(new Float32Array([Number.NaN, Number.POSITIVE_INFINITY, 0.5]).buffer)],
    );
    assert.equal(response.status, 200, response.body.toString());
    const { json, binary } = splitBinaryResponse(response);
    const outputs = json.outputs as OutputJson[];
    // binary_data_output chooses for outputs the request does not list; J is listed.
    assert.deepEqual(outputs[0], { name: "J", datatype: "INT32", shape: [1], data: [5] });
    assert.deepEqual(outputs[1], {
      name: "B",
      datatype: "INT32",
      shape: [2],
      parameters: { binary_data_size: 8 },
    });
    // NaN and the infinities are written as Triton's rapidjson writes them, which tritonclient reads.
    assert.match(response.body.toString("latin1"), /"data":\[NaN,Infinity,0\.5\]/);
    assert.deepEqual(outputs[2], {
      name: "F",
      datatype: "FP32",
      shape: [3],
      data: [Number.NaN, Number.POSITIVE_INFINITY, 0.5],
    });
    assert.deepEqual(
      [...new Int32Array(binary.buffer.slice(binary.byteOffset, binary.byteOffset + 8))],
      [7, 8],
    );
  });

  it("an FP16 output the model did not declare cannot be sent as JSON", async () => {
    const response = await postBinary(
      "echo",
      { inputs: [{ name: "H", datatype: "FP16", shape: [1], parameters: { binary_data_size: 2 } }] },
      [new Uint8Array([0, 0x3c])],
    );
    assert.equal(response.status, 400);
    assert.deepEqual(bodyJson(response), {
      error: "sending FP16 data via JSON is not supported. Please use the binary data format for output",
    });
  });

  it("binary outputs of a JSON request", async () => {
    const response = await send(
      server,
      "POST",
      "/v2/models/echo/infer",
      JSON.stringify({
        inputs: [{ name: "A", datatype: "UINT8", shape: [2], data: [1, 2] }],
        outputs: [{ name: "A", parameters: { binary_data: true } }],
      }),
    );
    assert.equal(response.status, 200);
    assert.equal(response.headers["content-type"], "application/octet-stream");
    const { binary } = splitBinaryResponse(response);
    assert.deepEqual([...binary], [1, 2]);
  });

  it("sizes that disagree with the header or the shape are refused, naming the input", async () => {
    const input = (name: string, size: number, datatype = "INT32", shape = [1]) => ({
      name,
      datatype,
      shape,
      parameters: { binary_data_size: size },
    });
    await refused(
      { inputs: [input("A", 4), input("B", 8, "INT32", [2])] },
      [new Uint8Array(8)],
      "unexpected size for input 'B', expecting 4 additional bytes for model 'echo'",
    );
    await refused(
      { inputs: [input("A", 4)] },
      [new Uint8Array(8)],
      "unexpected additional input data for model 'echo': 4 bytes follow the last binary input",
    );
    // Against a model that declares its input: Triton's checks, in Triton's order (the
    // datatype and shape before the byte size), with the request's id.
    server.fake.registry.add(
      new FakeModel({
        name: "declared",
        config: { inputs: [inputConfig("A", "INT32", [3]), inputConfig("S", "BYTES", [2])] },
        infer: () => Promise.reject(new Error("not run")),
      }),
    );
    const declared = async (header: unknown, message: string, part = new Uint8Array(8)) => {
      const { body, headerLength } = binaryRequest(header, [part]);
      const response = await send(server, "POST", "/v2/models/declared/infer", body, {
        "inference-header-content-length": headerLength,
      });
      assert.equal(response.status, 400, response.body.toString());
      assert.deepEqual(bodyJson(response), { error: message });
    };
    await declared(
      { id: "r7", inputs: [input("A", 8, "INT32", [3])] },
      "[request id: r7] input byte size mismatch for input 'A' for model 'declared'. Expected 12, got 8",
    );
    await declared(
      { inputs: [input("A", 8, "FP32", [3])] },
      "[request id: <id_unknown>] inference input 'A' data-type is 'FP32', but model 'declared' expects 'INT32'",
    );
    await declared(
      { inputs: [input("A", 8, "INT32", [4])] },
      "[request id: <id_unknown>] unexpected shape for input 'A' for model 'declared'. Expected [3], got [4].",
    );
    // BYTES elements that do not match the shape, in the words of Triton's ValidateBytesInputs.
    await declared(
      { inputs: [input("S", 6, "BYTES", [2])] },
      "[request id: <id_unknown>] expected 2 string elements for inference input 'S' for model 'declared', got 1",
      new Uint8Array([2, 0, 0, 0, 104, 105]),
    );
    await declared(
      { inputs: [input("S", 15, "BYTES", [2])] },
      "[request id: <id_unknown>] unexpected number of string elements 3 for inference input 'S' for model 'declared', expecting 2",
      new Uint8Array([1, 0, 0, 0, 97, 1, 0, 0, 0, 98, 1, 0, 0, 0, 99]),
    );
    await declared(
      { inputs: [input("S", 7, "BYTES", [2])] },
      "[request id: <id_unknown>] incomplete string length indicator for inference input 'S' for model 'declared', expecting 4 bytes but only 2 bytes available. Please make sure the string length indicator is in one buffer.",
      new Uint8Array([1, 0, 0, 0, 97, 1, 0]),
    );
    // An element whose length runs past the data: counted, as Triton counts it, then too few.
    await declared(
      { id: "b6", inputs: [input("S", 7, "BYTES", [2])] },
      "[request id: b6] expected 2 string elements for inference input 'S' for model 'declared', got 1",
      new Uint8Array([9, 0, 0, 0, 97, 98, 99]),
    );
    // The same for an input the model does not have: Triton's earlier check speaks first.
    await declared(
      { inputs: [input("T", 7, "BYTES", [2])] },
      "unexpected inference input 'T' for model 'declared'",
      new Uint8Array([9, 0, 0, 0, 97, 98, 99]),
    );
    await refused(
      { inputs: [input("A", -4)] },
      [],
      "Unable to parse 'binary_data_size' for input 'A': expected a non-negative integer, got number -4",
    );
  });

  it("a bad Inference-Header-Content-Length is refused", async () => {
    const body = JSON.stringify({ inputs: [] });
    const tooLong = await send(server, "POST", "/v2/models/echo/infer", body, {
      "inference-header-content-length": body.length + 1,
    });
    assert.equal(tooLong.status, 400);
    assert.deepEqual(bodyJson(tooLong), {
      error: `inference header size should be in range (0, ${body.length}), got: ${body.length + 1} (the request body has ${body.length} bytes)`,
    });
    const notNumber = await send(server, "POST", "/v2/models/echo/infer", body, {
      "inference-header-content-length": "ten",
    });
    assert.equal(notNumber.status, 400);
    assert.deepEqual(bodyJson(notNumber), {
      error: "Unable to parse Inference-Header-Content-Length, got: ten",
    });
    const shortHeader = await send(server, "POST", "/v2/models/echo/infer", body, {
      "inference-header-content-length": 4,
    });
    assert.equal(shortHeader.status, 400);
    assert.match(
      (bodyJson(shortHeader) as { error: string }).error,
      /^failed to parse the request JSON buffer: /,
    );
  });
});

describe("the raw-body form (Inference-Header-Content-Length: 0)", () => {
  let server: TestServer;
  before(async () => {
    server = await startServer();
  });
  after(() => server.close());

  const raw = (model: string, body: Uint8Array) =>
    send(server, "POST", `/v2/models/${model}/infer`, body, {
      "content-type": "application/octet-stream",
      "inference-header-content-length": 0,
    });

  it("shapes the body after the model's only input, batch dimension 1 and the variable dim deduced", async () => {
    const values = new Float32Array([0.5, 1.5, 2.5]);
    const response = await raw("raw_fp32", new Uint8Array(values.buffer));
    assert.equal(response.status, 200, response.body.toString());
    assert.equal(response.headers["content-type"], "application/octet-stream");
    const { json, binary } = splitBinaryResponse(response);
    assert.deepEqual(json.outputs, [
      { name: "INPUT0", datatype: "FP32", shape: [1, 3], parameters: { binary_data_size: 12 } },
    ]);
    assert.deepEqual(
      new Float32Array(binary.buffer.slice(binary.byteOffset, binary.byteOffset + 12)),
      values,
    );
  });

  it("fixed shapes, and BYTES of shape [1]", async () => {
    const fixed = await raw("raw_fixed", new Uint8Array(12));
    assert.equal(fixed.status, 200);
    assert.deepEqual((splitBinaryResponse(fixed).json.outputs as OutputJson[])[0]?.shape, [2, 3]);
    const text = await raw("raw_bytes", new TextEncoder().encode("hello raw"));
    assert.equal(text.status, 200);
    const tensor = server.fake.registry.model("raw_bytes").requests.at(-1)?.inputs.get("TEXT");
    assert.ok(tensor !== undefined);
    assert.deepEqual(tensor.shape, [1]);
    assert.equal(new TextDecoder().decode((tensor.data as BytesElements)[0]), "hello raw");
  });

  it("refuses bodies it cannot shape, with Triton's messages", async () => {
    const cases: [string, number, string][] = [
      [
        "raw_two",
        8,
        "[request id: <id_unknown>] Raw request must only have 1 input (found 1) to be deduced but got 2 inputs in 'raw_two' model configuration",
      ],
      [
        "raw_two_var",
        8,
        "[request id: <id_unknown>] The shape of the raw input 'A' can not be deduced because there are more than one variable-sized dimension",
      ],
      [
        "raw_fixed",
        10,
        "[request id: <id_unknown>] input byte size mismatch for input 'INPUT0' for model 'raw_fixed'. Expected 12, got 10",
      ],
      [
        "raw_fp32",
        10,
        "[request id: <id_unknown>] input byte size mismatch for input 'INPUT0' for model 'raw_fp32'. Expected 8, got 10",
      ],
    ];
    for (const [model, size, message] of cases) {
      const response = await raw(model, new Uint8Array(size));
      assert.equal(response.status, 400, model);
      assert.deepEqual(bodyJson(response), { error: message });
    }
  });
});

describe("binary outputs where the frontend's default is binary (WebSocket binary frames, SageMaker)", () => {
  const model = {
    name: "m",
    version: "1",
    config: { name: "m", maxBatchSize: 0, inputs: [], outputs: [] },
    inputs: [],
    outputs: [{ name: "OUTPUT0", datatype: "INT32", shape: [1] }],
  } as unknown as ServedModel;
  const decodedWith = (parameters: Record<string, unknown>) =>
    decodeInferRequest(
      Buffer.from(JSON.stringify({ inputs: [], outputs: [{ name: "OUTPUT0" }], parameters })),
      undefined,
      model,
      { binaryOutputByDefault: true },
    ).encoding;

  it("a request's binary_data_output applies to the outputs it lists; without it, the frontend's default does", () => {
    assert.equal(isBinaryOutput(decodedWith({ binary_data_output: false }), "OUTPUT0"), false);
    assert.equal(isBinaryOutput(decodedWith({}), "OUTPUT0"), true);
  });
});
