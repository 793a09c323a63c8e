import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import type { DataType } from "../../src/core/datatype.ts";
import type { NumericTensor } from "../../src/core/tensor.ts";
import { binaryRequest, postJson, send, startServer, type TestServer } from "./support/http-server.ts";

type Json = Record<string, unknown>;
type OutputJson = { name: string; datatype: string; shape: number[]; data: unknown[] };

const CASES: { datatype: DataType; data: unknown[]; array: string; expected?: unknown[] }[] = [
  { datatype: "BOOL", data: [true, false, true], array: "Uint8Array" },
  { datatype: "UINT8", data: [0, 7, 255], array: "Uint8Array" },
  { datatype: "UINT16", data: [0, 7, 65535], array: "Uint16Array" },
  { datatype: "UINT32", data: [0, 7, 4294967295], array: "Uint32Array" },
  { datatype: "UINT64", data: [0, 7, 9007199254740991], array: "BigUint64Array" },
  { datatype: "INT8", data: [-128, 0, 127], array: "Int8Array" },
  { datatype: "INT16", data: [-32768, 0, 32767], array: "Int16Array" },
  { datatype: "INT32", data: [-2147483648, 0, 2147483647], array: "Int32Array" },
  { datatype: "INT64", data: [-9007199254740991, 0, 9007199254740991], array: "BigInt64Array" },
  {
    datatype: "FP32",
    data: [0.1, -1.5, 3.4028234663852886e38],
    array: "Float32Array",
    expected: [Math.fround(0.1), -1.5, 3.4028234663852886e38],
  },
  { datatype: "FP64", data: [0.1, -2.5e-308, 1e308], array: "Float64Array" },
  { datatype: "BYTES", data: ["hello", "", "ünïcødé ✓"], array: "Array" },
];

function input(name: string, datatype: string, shape: unknown, data: unknown): Json {
  return { name, datatype, shape, data };
}

describe("inference with JSON tensors", () => {
  let server: TestServer;
  before(async () => {
    server = await startServer();
  });
  after(() => server.close());

  /** Expects `body` to be refused with `status` and `message`, and the next request to work. */
  async function refused(body: unknown, status: number, message: string, model = "echo"): Promise<void> {
    const response = await postJson(server, `/v2/models/${model}/infer`, body);
    assert.equal(response.status, status, JSON.stringify(response.json));
    assert.deepEqual(response.json, { error: message });
    const next = await postJson(server, "/v2/models/echo/infer", {
      inputs: [input("X", "INT32", [1], [5])],
    });
    assert.equal(next.status, 200);
  }

  for (const { datatype, data, array, expected } of CASES) {
    it(`${datatype} round-trips`, async () => {
      const echo = server.fake.registry.model("echo");
      const response = await postJson(server, "/v2/models/echo/infer", {
        id: `rt-${datatype}`,
        inputs: [input("INPUT0", datatype, [3], data)],
      });
      assert.equal(response.status, 200, JSON.stringify(response.json));
      assert.deepEqual(response.json, {
        model_name: "echo",
        model_version: "1",
        id: `rt-${datatype}`,
        outputs: [{ name: "INPUT0", datatype, shape: [3], data: expected ?? data }],
      });
      const tensor = echo.requests.at(-1)?.inputs.get("INPUT0") as NumericTensor;
      assert.equal(tensor.data.constructor.name, array);
    });
  }

  it("a request without an id gets an answer without one, as from Triton", async () => {
    const response = await postJson(server, "/v2/models/echo/infer", {
      inputs: [input("X", "INT32", [1], [5])],
    });
    assert.equal(response.status, 200);
    assert.deepEqual(Object.keys(response.json as object), ["model_name", "model_version", "outputs"]);
  });

  it("FP32 values come back as the same float32", async () => {
    const values = Array.from({ length: 200 }, (_, i) =>
      Math.fround(Math.sin(i + 1) * 10 ** ((i % 20) - 10)),
    );
    const response = await postJson(server, "/v2/models/echo/infer", {
      inputs: [input("F", "FP32", [values.length], values)],
    });
    const output = (response.json.outputs as OutputJson[])[0]!;
    assert.deepEqual(
      (output.data as number[]).map((v) => Math.fround(v)),
      values,
    );
  });

  it("NaN and the infinities are read and written as Triton's rapidjson does (tritonclient sends and reads them)", async () => {
    const echo = server.fake.registry.model("echo");
    const body =
      '{"parameters":{"threshold":-Infinity},"inputs":[' +
      '{"name":"F","datatype":"FP32","shape":[8],"data":[NaN,-NaN,Infinity,-Infinity,Inf,-Inf,1.5,-0.0]},' +
      '{"name":"S","datatype":"BYTES","shape":[2],"data":["NaN","x Infinity"]}]}';
    const response = await fetch(`${server.url}/v2/models/echo/infer`, { method: "POST", body });
    const text = await response.text();
    assert.equal(response.status, 200, text);
    const request = echo.requests.at(-1)!;
    assert.deepEqual(Array.from((request.inputs.get("F") as NumericTensor).data as Float32Array), [
      Number.NaN,
      Number.NaN,
      Infinity,
      -Infinity,
      Infinity,
      -Infinity,
      1.5,
      -0,
    ]);
    assert.equal(request.parameters.threshold, -Infinity);
    assert.match(text, /"data":\[NaN,NaN,Infinity,-Infinity,Infinity,-Infinity,1\.5,-0\.0\]/);
    assert.match(text, /"data":\["NaN","x Infinity"\]/);
    // Nor does it take one as a member's name; a shape is no place for one, and is told so.
    await refused(
      '{"parameters":{NaN:5},"inputs":[]}',
      400,
      "failed to parse the request JSON buffer: Missing a name for object member. at 15",
    );
    await refused(
      '{"inputs":[{"name":"F","datatype":"FP32","shape":[NaN],"data":[1]}]}',
      400,
      "Unable to parse 'shape' for input 'F': expected an array of non-negative integers, got [NaN]",
    );
    // A token rapidjson does not take is refused, as any text that is not JSON.
    await refused(
      '{"inputs":[{"name":"F","datatype":"FP32","shape":[1],"data":[nan]}]}',
      400,
      "failed to parse the request JSON buffer: Invalid value. at 62",
    );
  });

  it("INT64 and UINT64 extremes are written with their exact digits", async () => {
    const response = await send(
      server,
      "POST",
      "/v2/models/echo/infer",
      '{"inputs":[{"name":"A","datatype":"INT64","shape":[2],"data":[-9223372036854775808,9007199254740992]},' +
        '{"name":"B","datatype":"UINT64","shape":[1],"data":[18446744073709549568]}]}',
    );
    assert.equal(response.status, 200);
    const text = response.body.toString("utf8");
    assert.match(text, /"data":\[-9223372036854775808,9007199254740992\]/);
    assert.match(text, /"data":\[18446744073709549568\]/);
  });

  it("INT64 and UINT64 elements past 2^53 are read exactly, nested or not, and the extremes are accepted", async () => {
    const echo = server.fake.registry.model("echo");
    const response = await send(
      server,
      "POST",
      "/v2/models/echo/infer",
      '{"inputs":[{"name":"A","datatype":"INT64","shape":[2,2],"data":[[9007199254740993,-9223372036854775807],' +
        "[9223372036854775807, -9007199254740993]]}," +
        '{"name":"B","datatype":"UINT64","shape":[2],"data":[18446744073709551615, 12345678901234567891],"parameters":{"x":1}}]}',
    );
    assert.equal(response.status, 200, response.body.toString());
    const inputs = echo.requests.at(-1)!.inputs;
    assert.deepEqual(
      [...((inputs.get("A") as NumericTensor).data as BigInt64Array)],
      [9007199254740993n, -9223372036854775807n, 9223372036854775807n, -9007199254740993n],
    );
    assert.deepEqual(
      [...((inputs.get("B") as NumericTensor).data as BigUint64Array)],
      [18446744073709551615n, 12345678901234567891n],
    );
    const text = response.body.toString("utf8");
    assert.match(
      text,
      /"data":\[9007199254740993,-9223372036854775807,9223372036854775807,-9007199254740993\]/,
    );
    assert.match(text, /"data":\[18446744073709551615,12345678901234567891\]/);
  });

  it("INT64 and UINT64 elements past their range are refused with their digits", async () => {
    const cases: [string, string][] = [
      ["INT64", "9223372036854775808"],
      ["UINT64", "18446744073709551616"],
      ["UINT64", "9".repeat(1_000_000)],
    ];
    for (const [datatype, digits] of cases) {
      const response = await send(
        server,
        "POST",
        "/v2/models/echo/infer",
        `{"inputs":[{"name":"A","datatype":"${datatype}","shape":[1],"data":[${digits}]}]}`,
      );
      assert.equal(response.status, 400, datatype);
      const shown = digits.length > 32 ? `${digits.slice(0, 32)}…` : digits;
      const range = datatype === "INT64" ? "[-2^63, 2^63)" : "[0, 2^64)";
      assert.deepEqual(JSON.parse(response.body.toString("utf8")), {
        error: `unable to parse 'data' for input 'A': element 0 is ${shown}, but ${datatype} expects an integer in ${range}`,
      });
    }
  });

  it("nested data is read in row-major order", async () => {
    const echo = server.fake.registry.model("echo");
    const response = await postJson(server, "/v2/models/echo/infer", {
      inputs: [
        input(
          "A",
          "INT32",
          [2, 3],
          [
            [1, 2, 3],
            [4, 5, 6],
          ],
        ),
        input("B", "BYTES", [1, 2, 1], [[["x"], ["y"]]]),
        input("C", "FP64", [1, 1, 1, 1, 1, 1, 2], [[[[[[[0.5, 1.5]]]]]]]),
      ],
    });
    assert.equal(response.status, 200);
    const outputs = response.json.outputs as OutputJson[];
    assert.deepEqual(outputs[0], { name: "A", datatype: "INT32", shape: [2, 3], data: [1, 2, 3, 4, 5, 6] });
    assert.deepEqual(outputs[1]?.data, ["x", "y"]);
    assert.deepEqual(outputs[2]?.data, [0.5, 1.5]);
    const a = echo.requests.at(-1)?.inputs.get("A") as NumericTensor;
    assert.deepEqual([...a.data], [1, 2, 3, 4, 5, 6]);
  });

  it("data nested as deep as JSON may nest is read; deeper JSON is refused before it is parsed", async () => {
    // 512 levels in all: the request's object, its inputs, the input, and the data's 509.
    const body = (depth: number) =>
      `{"inputs":[{"name":"D","datatype":"INT8","shape":[${new Array(depth).fill(1).join(",")}],"data":${"[".repeat(depth)}3${"]".repeat(depth)}}]}`;
    const response = await send(server, "POST", "/v2/models/echo/infer", body(509));
    assert.equal(response.status, 200, response.body.toString());
    const output = (JSON.parse(response.body.toString()) as { outputs: OutputJson[] }).outputs[0]!;
    assert.deepEqual(output.data, [3]);
    // Brackets in strings are not nesting.
    const named = body(509).replace('"name":"D"', `"name":"D","unread":"${"[".repeat(600)}"`);
    assert.equal((await send(server, "POST", "/v2/models/echo/infer", named)).status, 200);
    for (const deeper of [body(510), body(1_000_000)]) {
      const refused = await send(server, "POST", "/v2/models/echo/infer", deeper);
      assert.equal(refused.status, 400);
      assert.deepEqual(JSON.parse(refused.body.toString()), {
        error:
          "the request JSON nests arrays and objects more than 512 levels deep; no tensor needs that many",
      });
    }
  });

  it("scalars and empty tensors", async () => {
    const response = await postJson(server, "/v2/models/echo/infer", {
      inputs: [input("S", "FP32", [], [2.5]), input("E", "INT32", [0, 4], [])],
    });
    assert.equal(response.status, 200);
    const outputs = response.json.outputs as OutputJson[];
    assert.deepEqual(outputs[0], { name: "S", datatype: "FP32", shape: [], data: [2.5] });
    assert.deepEqual(outputs[1], { name: "E", datatype: "INT32", shape: [0, 4], data: [] });
  });

  it("FP16 and BF16 in JSON are refused with Triton's message", async () => {
    for (const datatype of ["FP16", "BF16"]) {
      await refused(
        { inputs: [input("INPUT0", datatype, [1], [1])] },
        400,
        `receiving ${datatype} data via JSON is not supported. Please use the binary data format for input INPUT0`,
      );
    }
  });

  it("an FP16 output asked for as JSON is refused before the model runs", async () => {
    const half = server.fake.registry.model("half");
    const before = half.requests.length;
    const body = {
      inputs: [{ name: "INPUT0", datatype: "FP16", shape: [1], parameters: { binary_data_size: 2 } }],
    };
    const one = new Uint8Array([0, 0x3c]);
    const first = binaryRequest(body, [one]);
    const response = await send(server, "POST", "/v2/models/half/infer", first.body, {
      "inference-header-content-length": first.headerLength,
    });
    assert.equal(response.status, 400);
    assert.deepEqual(JSON.parse(response.body.toString()), {
      error: "sending FP16 data via JSON is not supported. Please use the binary data format for output",
    });
    assert.equal(half.requests.length, before);
    // Asking only for the FP32 output is fine.
    const second = binaryRequest({ ...body, outputs: [{ name: "OUTPUT1" }] }, [one]);
    const fp32Only = await send(server, "POST", "/v2/models/half/infer", second.body, {
      "inference-header-content-length": second.headerLength,
    });
    assert.equal(fp32Only.status, 200, fp32Only.body.toString());
  });

  it("malformed structure is refused with a precise message", async () => {
    await refused({ id: "x" }, 400, "Unable to parse 'inputs': the request has no 'inputs' member");
    await refused({ inputs: {} }, 400, "Unable to parse 'inputs': expected an array, got an object");
    await refused({ inputs: [3] }, 400, "Unable to parse 'inputs': input 0 is number 3, not an object");
    await refused(
      { inputs: [{ datatype: "INT32", shape: [1], data: [1] }] },
      400,
      "Unable to parse 'name' of input 0: expected a string, got nothing",
    );
    await refused(
      { inputs: [input("A", "FLOAT", [1], [1])] },
      400,
      "invalid datatype 'FLOAT' for input 'A' for model 'echo'",
    );
    await refused(
      { inputs: [input("A", "INT32", [-1], [1])] },
      400,
      "Unable to parse 'shape' for input 'A': expected an array of non-negative integers, got [-1]",
    );
    await refused(
      { inputs: [input("A", "INT32", [1.5], [1])] },
      400,
      "Unable to parse 'shape' for input 'A': expected an array of non-negative integers, got [1.5]",
    );
    await refused(
      { inputs: [input("A", "INT32", "1", [1])] },
      400,
      "Unable to parse 'shape' for input 'A': expected an array of non-negative integers, got \"1\"",
    );
    await refused(
      { inputs: [input("A", "INT32", [2, 2], [1, 2, 3])] },
      400,
      "unable to parse 'data' for input 'A': shape [2,2] has 4 elements, but 'data' holds 3",
    );
    await refused(
      { inputs: [input("A", "INT32", [2], [[1, 2], [3]])] },
      400,
      "unable to parse 'data' for input 'A': shape [2] has 2 elements, but 'data' holds 3",
    );
    await refused(
      { inputs: [input("A", "INT32", [1], 5)] },
      400,
      "unable to parse 'data' for input 'A': expected an array, got 5",
    );
    await refused(
      { inputs: [{ name: "A", datatype: "INT32", shape: [1] }] },
      400,
      "input 'A' must set exactly one of 'data' and 'binary_data_size' in 'parameters', but sets neither",
    );
    await refused(
      { inputs: [{ ...input("A", "INT32", [1], [1]), parameters: { binary_data_size: 4 } }] },
      400,
      "input 'A' must set exactly one of 'data' and 'binary_data_size' in 'parameters', but sets both",
    );
    await refused(
      { inputs: [{ name: "A", datatype: "INT32", shape: [1], parameters: { binary_data_size: 4 } }] },
      400,
      "must specify a valid 'Inference-Header-Content-Length' header when passing inputs in binary data format (input 'A' sets 'binary_data_size')",
    );
    await refused(
      { inputs: [input("A", "INT32", [1], [1]), input("A", "INT32", [1], [2])] },
      400,
      "input 'A' is given more than once in the request to model 'echo'",
    );
    await refused(
      { id: 7, inputs: [input("A", "INT32", [1], [1])] },
      400,
      "Unable to parse 'id': expected a string, got number 7",
    );
    // Triton's own parameter names are refused over HTTP, as Triton does.
    for (const name of ["triton_enable_empty_final_response", "triton_other"]) {
      await refused(
        { parameters: { [name]: true }, inputs: [input("A", "INT32", [1], [1])] },
        400,
        "parameter keys starting with 'triton_' are reserved for Triton usage and should not be specified.",
      );
    }
    await refused(
      { inputs: [], outputs: {} },
      400,
      "Unable to parse 'outputs': expected an array, got an object",
    );
    await refused(
      { inputs: [], outputs: [{ name: "A", parameters: { binary_data: 1 } }] },
      400,
      "Unable to parse 'binary_data' for output 'A': expected a bool, got number 1",
    );
  });

  it("elements of the wrong JSON type or out of range are refused", async () => {
    const cases: [string, unknown, string][] = [
      ["INT32", "1", 'element 0 is "1", but INT32 expects an integer in [-2147483648, 2147483647]'],
      ["INT32", 1.5, "element 0 is 1.5, but INT32 expects an integer in [-2147483648, 2147483647]"],
      ["UINT8", 256, "element 0 is 256, but UINT8 expects an integer in [0, 255]"],
      ["INT8", -129, "element 0 is -129, but INT8 expects an integer in [-128, 127]"],
      ["UINT16", -1, "element 0 is -1, but UINT16 expects an integer in [0, 65535]"],
      ["UINT32", 4294967296, "element 0 is 4294967296, but UINT32 expects an integer in [0, 4294967295]"],
      ["UINT64", -1, "element 0 is -1, but UINT64 expects an integer in [0, 2^64)"],
      ["INT64", 2 ** 63, "element 0 is 9223372036854776000, but INT64 expects an integer in [-2^63, 2^63)"],
      ["BOOL", 1, "element 0 is 1, but BOOL expects true or false"],
      ["BOOL", "true", 'element 0 is "true", but BOOL expects true or false'],
      ["BYTES", 5, "element 0 is 5, but BYTES expects a string"],
      ["FP32", "0.5", 'element 0 is "0.5", but FP32 expects a number'],
      ["FP64", null, "element 0 is null, but FP64 expects a number"],
      ["INT16", { v: 1 }, "element 0 is an object, but INT16 expects an integer in [-32768, 32767]"],
    ];
    for (const [datatype, value, detail] of cases) {
      await refused(
        { inputs: [input("V", datatype, [1], [value])] },
        400,
        `unable to parse 'data' for input 'V': ${detail}`,
      );
    }
  });

  it("a shape of nested lists is refused with 400 showing its start, not 500", async () => {
    const depth = 400;
    const body = `{"inputs":[{"name":"A","datatype":"INT32","shape":${"[".repeat(depth)}${"]".repeat(depth)},"data":[1]}]}`;
    const response = await send(server, "POST", "/v2/models/echo/infer", body);
    assert.equal(response.status, 400, response.body.toString().slice(0, 200));
    assert.deepEqual(JSON.parse(response.body.toString()), {
      error: `Unable to parse 'shape' for input 'A': expected an array of non-negative integers, got ${"[".repeat(64)}…`,
    });
  });

  it("the classification extension: an output's top classes as 'value:index', largest first, values as Triton prints them", async () => {
    const response = await postJson(server, "/v2/models/echo/infer", {
      inputs: [input("A", "FP32", [4], [0.25, 0.75, 0.0078125, 0.75])],
      outputs: [{ name: "A", parameters: { classification: 3 } }],
    });
    assert.equal(response.status, 200, JSON.stringify(response.json));
    assert.deepEqual(response.json.outputs, [
      { name: "A", datatype: "BYTES", shape: [3], data: ["0.750000:1", "0.750000:3", "0.250000:0"] },
    ]);
    const ties = await postJson(server, "/v2/models/echo/infer", {
      inputs: [input("A", "FP32", [2], [0.0078125, -3])],
      outputs: [{ name: "A", parameters: { classification: 5 } }],
    });
    // printf rounds a tie to even; fewer values than asked for: all of them.
    assert.deepEqual(ties.json.outputs, [
      { name: "A", datatype: "BYTES", shape: [2], data: ["0.007812:0", "-3.000000:1"] },
    ]);
    await refused(
      {
        inputs: [input("A", "FP32", [1], [1])],
        outputs: [{ name: "A", parameters: { classification: -1 } }],
      },
      400,
      "Unable to set 'classification' for output 'A': expected a whole number of classes",
    );
    await refused(
      {
        inputs: [input("A", "BOOL", [1], [true])],
        outputs: [{ name: "A", parameters: { classification: 1 } }],
      },
      400,
      "class result not available for output 'A' due to unsupported type 'BOOL'",
    );
  });

  it("requested outputs select what comes back", async () => {
    const response = await postJson(server, "/v2/models/echo/infer", {
      inputs: [input("A", "INT32", [1], [1]), input("B", "INT32", [1], [2])],
      outputs: [{ name: "B" }],
    });
    assert.deepEqual(
      (response.json.outputs as OutputJson[]).map((o) => o.name),
      ["B"],
    );
    const recorder = await postJson(server, "/v2/models/recorder/infer", { inputs: [], outputs: [] });
    assert.equal(recorder.status, 200);
    assert.equal(server.fake.registry.model("recorder").requests.at(-1)?.outputs, undefined);
  });

  it("parameters reach the model, binary_data_output does not", async () => {
    const recorder = server.fake.registry.model("recorder");
    const response = await postJson(server, "/v2/models/recorder/infer", {
      id: "p1",
      parameters: { priority: 2, note: "hi", flag: true, binary_data_output: false },
      inputs: [],
    });
    assert.equal(response.status, 200);
    const request = recorder.requests.at(-1)!;
    assert.deepEqual(request.parameters, { priority: 2, note: "hi", flag: true });
    assert.equal(request.id, "p1");
    // Integers past 2^53 as Triton reads them: exact within 64 bits, a double past them.
    const big = await postJson(
      server,
      "/v2/models/recorder/infer",
      '{"parameters":{"big":9007199254740993,"small":-9223372036854775808,"huge":18446744073709551615},"inputs":[]}',
    );
    assert.equal(big.status, 200);
    assert.deepEqual(recorder.requests.at(-1)!.parameters, {
      big: 9007199254740993n,
      small: -9223372036854775808n,
      huge: 2 ** 64,
    });
    assert.equal(request.sequence, undefined);
    assert.ok(request.signal instanceof AbortSignal);
    await refused(
      { parameters: { nested: { a: 1 } }, inputs: [] },
      400,
      "Unable to parse parameter 'nested': expected a bool, number or string, got an object",
    );
    await refused(
      { parameters: { binary_data_output: "yes" }, inputs: [] },
      400,
      "Unable to parse 'binary_data_output': expected a bool, got string \"yes\"",
    );
    await refused(
      { parameters: [1], inputs: [] },
      400,
      "Unable to parse 'parameters': expected an object, got an array",
    );
  });
});

describe("sequence ids over HTTP", () => {
  let server: TestServer;
  before(async () => {
    server = await startServer();
  });
  after(() => server.close());

  async function sequenceRequest(idText: string, extra = ""): Promise<{ status: number; text: string }> {
    const body = `{"parameters":{"sequence_start":true${extra},"sequence_id":${idText}},"inputs":[{"name":"A","datatype":"INT32","shape":[1],"data":[1]}]}`;
    const response = await send(server, "POST", "/v2/models/echo/infer", body);
    return { status: response.status, text: response.body.toString("utf8") };
  }

  for (const id of ["18446744073709551615", "9007199254740993", "9007199254740992", "42"]) {
    it(`uint64 id ${id} reaches the model and comes back exactly`, async () => {
      const echo = server.fake.registry.model("echo");
      const { status, text } = await sequenceRequest(id, ',"sequence_end":false');
      assert.equal(status, 200, text);
      const request = echo.requests.at(-1)!;
      assert.deepEqual(request.sequence, { id: BigInt(id), start: true, end: false, timeoutUs: undefined });
      assert.equal(request.parameters.sequence_id?.toString(), id);
      assert.match(text, new RegExp(`"parameters":\\{"sequence_id":${id}\\}`));
    });
  }

  it("the exact id is found among other members, nested values and escaped keys", async () => {
    const echo = server.fake.registry.model("echo");
    const body = `{ "id" : "a}b\\"c", "inputs" : [ {"name":"A","datatype":"INT32","shape":[1],"data":[1], "parameters": {"sequence_id": 1}} ],
      "parameters" : { "x\\u0079" : {"sequence_id": 5}, "sequence_start" : true , "sequence_id"
      :  18446744073709551614 } }`;
    const response = await send(server, "POST", "/v2/models/echo/infer", body);
    // The nested object value is refused as a parameter; check the scanner with a valid body too.
    assert.equal(response.status, 400);
    const valid = body.replace('{"sequence_id": 5}', '"{}"');
    const ok = await send(server, "POST", "/v2/models/echo/infer", valid);
    assert.equal(ok.status, 200, ok.body.toString());
    assert.equal(echo.requests.at(-1)?.sequence?.id, 18446744073709551614n);
  });

  it("an id of a million digits is refused as any id past 2^64", async () => {
    const { status, text } = await sequenceRequest("9".repeat(1_000_000));
    assert.equal(status, 400);
    assert.equal(
      text,
      `{"error":"Unable to parse 'sequence_id': attempt to access JSON non-string as string"}`,
    );
  });

  it("string ids work", async () => {
    const echo = server.fake.registry.model("echo");
    const { status, text } = await sequenceRequest('"session-7"');
    assert.equal(status, 200);
    assert.equal(echo.requests.at(-1)?.sequence?.id, "session-7");
    assert.match(text, /"parameters":\{"sequence_id":"session-7"\}/);
  });

  it("ids that are not uint64 or string are refused with Triton's message", async () => {
    // 1.0 and 1e3 are whole numbers to JSON.parse but doubles to rapidjson, which Triton refuses.
    for (const bad of [
      "-1",
      "1.5",
      "18446744073709551616",
      "1e19",
      "1.0",
      "1e3",
      "7E0",
      "true",
      "[1]",
      "null",
      "{}",
    ]) {
      const { status, text } = await sequenceRequest(bad);
      assert.equal(status, 400, bad);
      assert.equal(
        text,
        `{"error":"Unable to parse 'sequence_id': attempt to access JSON non-string as string"}`,
        bad,
      );
    }
  });

  it("start and end flags and timeout become the request's sequence control", async () => {
    const echo = server.fake.registry.model("echo");
    const { status } = await sequenceRequest("7", ',"sequence_end":true,"timeout":1000');
    assert.equal(status, 200);
    assert.deepEqual(echo.requests.at(-1)?.sequence, { id: 7n, start: true, end: true, timeoutUs: 1000 });
    for (const [parameters, error] of [
      [
        ',"sequence_end":"yes"',
        "Unable to parse 'sequence_end': attempt to access JSON non-boolean as boolean",
      ],
      [
        ',"sequence_end":null',
        "Unable to parse 'sequence_end': attempt to access JSON non-boolean as boolean",
      ],
      [
        ',"timeout":-5',
        "Unable to parse 'timeout': attempt to access JSON non-unsigned-integer as unsigned-integer",
      ],
      [
        ',"timeout":[1]',
        "Unable to parse 'timeout': attempt to access JSON non-unsigned-integer as unsigned-integer",
      ],
      // Doubles to rapidjson, which Triton's reader of an unsigned integer refuses.
      ...[',"timeout":5.0', ',"timeout":1e6', ',"timeout":18446744073709551616'].map((parameter) => [
        parameter,
        "Unable to parse 'timeout': attempt to access JSON non-unsigned-integer as unsigned-integer",
      ]),
      // `priority` is read as Triton reads it too: an unsigned integer.
      ...[
        ',"priority":"high"',
        ',"priority":true',
        ',"priority":-1',
        ',"priority":1.5',
        ',"priority":[1]',
      ].map((parameter) => [
        parameter,
        "Unable to parse 'priority': attempt to access JSON non-unsigned-integer as unsigned-integer",
      ]),
    ]) {
      const bad = await sequenceRequest("7", parameters!);
      assert.equal(bad.status, 400, parameters);
      assert.equal(bad.text, JSON.stringify({ error }), parameters);
    }
  });
});
