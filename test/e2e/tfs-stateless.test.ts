import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { status } from "@grpc/grpc-js";
import { MODEL_SERVICE_NAME, tfsTypes } from "../../src/frontends/tfs/proto-definitions.ts";
import { OnnxModelBuilder } from "../../tools/onnx/onnx-model-builder.ts";
import { addSubModel, identityModel } from "../../tools/onnx/test-models.ts";
import { type OvmsServer, SILERO_OVMS, startOvmsServer } from "../tfs/support/ovms-server.ts";
import { controlTensor, floatTensor, TfsClient } from "../tfs/support/tfs-client.ts";

// TF-Serving's API on stateless models, as an OVMS config.json lists them: REST predict
// in the row form ("instances" → "predictions") and the column form ("inputs" →
// "outputs"), with TF-Serving's JSON rules (named or bare values, a lone output
// unwrapped, scalars, {"b64": …} bytes); gRPC Predict with tensor_content and with every
// typed *_val field; model status and metadata over both.

let ovms: OvmsServer;
let client: TfsClient;
before(async () => {
  ovms = await startOvmsServer({
    add_sub: { onnx: addSubModel("INT32", [-1, 4]) },
    one_float: { onnx: identityModel("FP32", [-1, 3]) },
    one_half: { onnx: identityModel("FP16", [-1, 2]) },
    strings: { onnx: identityModel("BYTES", [-1, 2]) },
    string_scalar: { onnx: identityModel("BYTES", []) },
    float_scalar: { onnx: identityModel("FP32", []) },
    // One scalar per row: the model's shape is its batch dimension alone.
    row_scalars: { onnx: identityModel("FP32", [-1]) },
    ids: { onnx: identityModel("INT64", [-1, 2]) },
    unsigned_ids: { onnx: identityModel("UINT64", [-1, 2]) },
    // TF-Serving writes an output whose name ends in _bytes as {"b64": …}.
    raw_bytes: {
      onnx: new OnnxModelBuilder({ opset: 17 })
        .input("data", "BYTES", [-1, 1])
        .output("data_bytes", "BYTES", [-1, 1])
        .node("Identity", ["data"], ["data_bytes"])
        .toBytes(),
    },
    // 0/0, 1/0 and -1/0: the non-finite values a model may answer.
    divide: {
      onnx: new OnnxModelBuilder({ opset: 17 })
        .input("x", "FP32", [-1, 3])
        .input("y", "FP32", [-1, 3])
        .output("ratio", "FP32", [-1, 3])
        .node("Div", ["x", "y"], ["ratio"])
        .toBytes(),
    },
    vad: SILERO_OVMS,
  });
  client = new TfsClient(ovms.grpcPort);
});
after(async () => {
  client.close();
  await ovms.stop();
});

async function post(path: string, body: unknown): Promise<{ status: number; json: Record<string, unknown> }> {
  const response = await fetch(`${ovms.url}${path}`, {
    method: "POST",
    body: typeof body === "string" ? body : JSON.stringify(body),
  });
  return { status: response.status, json: (await response.json()) as Record<string, unknown> };
}

async function get(path: string): Promise<{ status: number; json: Record<string, unknown> }> {
  const response = await fetch(`${ovms.url}${path}`);
  return { status: response.status, json: (await response.json()) as Record<string, unknown> };
}

describe("REST predict on stateless models", () => {
  it("row form, named instances: one prediction object per instance", async () => {
    const answer = await post("/v1/models/add_sub:predict", {
      instances: [
        { INPUT0: [1, 2, 3, 4], INPUT1: [10, 20, 30, 40] },
        { INPUT0: [5, 6, 7, 8], INPUT1: [1, 1, 1, 1] },
      ],
    });
    assert.equal(answer.status, 200, JSON.stringify(answer.json));
    assert.deepEqual(answer.json, {
      predictions: [
        { OUTPUT0: [11, 22, 33, 44], OUTPUT1: [-9, -18, -27, -36] },
        { OUTPUT0: [6, 7, 8, 9], OUTPUT1: [4, 5, 6, 7] },
      ],
    });
  });

  it("row form takes as many instances as the model's dynamic batch dimension allows, as OVMS does", async () => {
    // Triton's autocomplete would give the model max_batch_size 4.
    const instances = Array.from({ length: 300 }, (_, i) => [i, i + 0.5, -i - 1]);
    const answer = await post("/v1/models/one_float:predict", { instances });
    assert.equal(answer.status, 200, JSON.stringify(answer.json));
    assert.deepEqual(answer.json, { predictions: instances });
  });

  it("row form, bare instances for a one-input model: a bare prediction per instance", async () => {
    const answer = await post("/v1/models/one_float/versions/1:predict", {
      signature_name: "predict", // not read, as OVMS does not read it
      instances: [
        [1.5, 2.5, -3],
        [0, 0.25, 7],
      ],
    });
    assert.equal(answer.status, 200, JSON.stringify(answer.json));
    assert.deepEqual(answer.json, {
      predictions: [
        [1.5, 2.5, -3],
        [0, 0.25, 7],
      ],
    });
  });

  it("column form, named inputs: outputs by name", async () => {
    const answer = await post("/v1/models/add_sub:predict", {
      inputs: { INPUT0: [[1, 2, 3, 4]], INPUT1: [[4, 3, 2, 1]] },
    });
    assert.equal(answer.status, 200, JSON.stringify(answer.json));
    assert.deepEqual(answer.json, { outputs: { OUTPUT0: [[5, 5, 5, 5]], OUTPUT1: [[-3, -1, 1, 3]] } });
  });

  it("a version label is read and not used, as OVMS does: the default version answers", async () => {
    const inputs = { INPUT0: [[1, 2, 3, 4]], INPUT1: [[4, 3, 2, 1]] };
    const answer = await post("/v1/models/add_sub/labels/stable:predict", { inputs });
    assert.equal(answer.status, 200, JSON.stringify(answer.json));
    assert.deepEqual(answer.json, { outputs: { OUTPUT0: [[5, 5, 5, 5]], OUTPUT1: [[-3, -1, 1, 3]] } });
    assert.equal((await get("/v1/models/add_sub/labels/stable")).status, 200);
    const grpc = await client.predict({
      model_spec: { name: "add_sub", version_label: "stable" },
      inputs: {
        INPUT0: {
          dtype: "DT_INT32",
          tensor_shape: { dim: [{ size: 1 }, { size: 4 }] },
          int_val: [1, 2, 3, 4],
        },
        INPUT1: {
          dtype: "DT_INT32",
          tensor_shape: { dim: [{ size: 1 }, { size: 4 }] },
          int_val: [4, 3, 2, 1],
        },
      },
    });
    assert.equal(grpc.model_spec.version?.value, "1");
  });

  it("non-finite outputs are written as TF-Serving writes them: NaN, Infinity, -Infinity", async () => {
    const response = await fetch(`${ovms.url}/v1/models/divide:predict`, {
      method: "POST",
      body: JSON.stringify({ inputs: { x: [[0, 1, -1]], y: [[0, 0, 0]] } }),
    });
    assert.equal(response.status, 200);
    // Python's json reads these tokens; JSON.parse does not, so the text is compared.
    assert.equal(await response.text(), '{"outputs":[[NaN,Infinity,-Infinity]]}');
    // And reads them in requests, as TF-Serving does (json.dumps writes them), in both forms.
    const sent = await fetch(`${ovms.url}/v1/models/divide:predict`, {
      method: "POST",
      body: '{"instances": [{"x": [NaN, Infinity, -Infinity], "y": [1, -1, 1]}]}',
    });
    assert.equal(await sent.text(), '{"predictions":[[NaN,-Infinity,-Infinity]]}');
    // Only as values: inside a string, or as a string, they are what they are.
    const quoted = await post("/v1/models/divide:predict", {
      inputs: { x: [["NaN", 1, 1]], y: [[1, 1, 1]] },
    });
    assert.equal(quoted.status, 400, JSON.stringify(quoted.json));
  });

  it("column form, a bare value for a one-input model: the lone output unwrapped", async () => {
    const answer = await post("/v1/models/one_float:predict", { inputs: [[1, 2, 3]] });
    assert.deepEqual(answer.json, { outputs: [[1, 2, 3]] });
    const half = await post("/v1/models/one_half:predict", { inputs: { INPUT0: [[0.5, -2]] } });
    assert.deepEqual(half.json, { outputs: [[0.5, -2]] }, "FP16 travels as JSON numbers");
  });

  it('bytes: strings and {"b64": …} in; strings out, {"b64": …} for an output named *_bytes', async () => {
    const bytes = Buffer.from("héllo wörld");
    const answer = await post("/v1/models/strings:predict", {
      instances: [["hello", { b64: bytes.toString("base64") }]],
    });
    assert.equal(answer.status, 200, JSON.stringify(answer.json));
    assert.deepEqual(answer.json, { predictions: [["hello", "héllo wörld"]] });
    const raw = await post("/v1/models/raw_bytes:predict", {
      inputs: [[{ b64: bytes.toString("base64") }], ["x"]],
    });
    assert.deepEqual(raw.json, {
      outputs: [[{ b64: bytes.toString("base64") }], [{ b64: Buffer.from("x").toString("base64") }]],
    });
  });

  it('a {"b64": …} value is one element, not a map of input names, as a bare column value or an instance', async () => {
    const hello = Buffer.from("hello").toString("base64");
    // Read as a scalar element, which a scalar input takes (its output comes back as [1]).
    const column = await post("/v1/models/string_scalar:predict", { inputs: { b64: hello } });
    assert.deepEqual(column, { status: 200, json: { outputs: "hello" } }, "the model's scalar, as a scalar");
    // Each instance one element: two instances stack to [2].
    const rows = await post("/v1/models/string_scalar:predict", { instances: [{ b64: hello }, "x"] });
    assert.deepEqual(rows, {
      status: 400,
      json: {
        error: "unexpected shape for input 'INPUT0' for model 'string_scalar'. Expected [1], got [2].",
      },
    });
  });

  it("INT64 and UINT64 values past 2^53 are read exactly, in both forms", async () => {
    const text = async (path: string, body: string): Promise<string> => {
      const response = await fetch(`${ovms.url}${path}`, { method: "POST", body });
      const answer = await response.text();
      assert.equal(response.status, 200, answer);
      return answer.replace(/\s/g, "");
    };
    const rows = await text(
      "/v1/models/ids:predict",
      '{"instances": [{"INPUT0": [9007199254740993, -9223372036854775807]}, {"INPUT0": [9223372036854775807, 1]}]}',
    );
    assert.equal(rows, '{"predictions":[[9007199254740993,-9223372036854775807],[9223372036854775807,1]]}');
    const bare = await text(
      "/v1/models/ids:predict",
      '{"instances": [[9007199254740993, 2], [3, -9007199254740993]]}',
    );
    assert.equal(bare, '{"predictions":[[9007199254740993,2],[3,-9007199254740993]]}');
    const column = await text(
      "/v1/models/unsigned_ids:predict",
      '{"inputs": {"INPUT0": [[18446744073709551615, 12345678901234567891]]}}',
    );
    assert.equal(column, '{"outputs":[[18446744073709551615,12345678901234567891]]}');
  });

  it("a scalar input as a scalar, as OVMS takes it (Silero VAD's sr: a bare number, gRPC shape [])", async () => {
    // The config, as Triton writes it, has dims [1]; the model's own rank is 0.
    for (const sr of ["16000", "[16000]"]) {
      const body = `{"inputs": {"input": [[${new Array(512).fill(0).join(",")}]], "sr": ${sr}, "sequence_control_input": [1]}}`;
      const answer = await post("/v1/models/vad:predict", body);
      assert.equal(answer.status, 200, JSON.stringify(answer.json));
      const outputs = answer.json.outputs as Record<string, unknown>;
      assert.deepEqual(Object.keys(outputs).sort(), ["output", "sequence_id"]);
    }
    const grpc = await client.predict({
      model_spec: { name: "vad" },
      inputs: {
        input: floatTensor(new Float32Array(512), [1, 512]),
        sr: { dtype: "DT_INT64", tensor_shape: {}, int64_val: ["16000"] },
        sequence_control_input: controlTensor(1),
      },
    });
    assert.deepEqual(Object.keys(grpc.outputs).sort(), ["output", "sequence_id"]);
  });

  it("a model's scalar output as a scalar, as OVMS answers it (the config, in Triton's form, has dims [1])", async () => {
    const column = await post("/v1/models/float_scalar:predict", { inputs: { INPUT0: 2.5 } });
    assert.deepEqual(column, { status: 200, json: { outputs: 2.5 } });
    // TF-Serving's row writer refuses a tensor with no dimensions; rows keep the one element.
    const rows = await post("/v1/models/float_scalar:predict", { instances: [2.5] });
    assert.deepEqual(rows, { status: 200, json: { predictions: [2.5] } });
    const grpc = await client.predict({
      model_spec: { name: "float_scalar" },
      inputs: { INPUT0: { dtype: "DT_FLOAT", tensor_shape: {}, float_val: [2.5] } },
    });
    assert.deepEqual(grpc.outputs.OUTPUT0?.tensor_shape, { dim: [] });
    const metadata = await fetch(`${ovms.url}/v1/models/float_scalar/metadata`).then((r) => r.json());
    const signature = (
      metadata as {
        metadata: {
          signature_def: { signatureDef: Record<string, Record<string, Record<string, unknown>>> };
        };
      }
    ).metadata.signature_def.signatureDef.serving_default!;
    for (const side of ["inputs", "outputs"]) {
      const [tensor] = Object.values(signature[side]!) as { tensorShape: unknown }[];
      assert.deepEqual(tensor!.tensorShape, { dim: [], unknownRank: false }, side);
    }
  });

  it("a model of one scalar per row takes and answers [N], as OVMS does (Triton's form is [N, 1])", async () => {
    const rows = await post("/v1/models/row_scalars:predict", { instances: [1.5, 2, -3] });
    assert.deepEqual(rows, { status: 200, json: { predictions: [1.5, 2, -3] } });
    const column = await post("/v1/models/row_scalars:predict", { inputs: [1.5, 2] });
    assert.deepEqual(column, { status: 200, json: { outputs: [1.5, 2] } });
    const grpc = await client.predict({
      model_spec: { name: "row_scalars" },
      inputs: { INPUT0: floatTensor(Float32Array.of(4, 5, 6), [3]) },
    });
    assert.deepEqual(grpc.outputs.OUTPUT0?.tensor_shape, { dim: [{ size: "3" }] });
    const metadata = await get("/v1/models/row_scalars/metadata");
    const signature = (
      metadata.json as {
        metadata: {
          signature_def: { signatureDef: Record<string, Record<string, Record<string, unknown>>> };
        };
      }
    ).metadata.signature_def.signatureDef.serving_default!;
    for (const side of ["inputs", "outputs"]) {
      const [tensor] = Object.values(signature[side]!) as { tensorShape: unknown }[];
      assert.deepEqual(tensor!.tensorShape, { dim: [{ size: "-1", name: "" }], unknownRank: false }, side);
    }
  });

  it('refuses what TF-Serving refuses, as {"error": …}', async () => {
    const cases: [string, unknown, number, RegExp][] = [
      [
        "/v1/models/add_sub:predict",
        { inputs: {}, instances: [] },
        400,
        /Could not detect row or column format/,
      ],
      ["/v1/models/add_sub:predict", "[1]", 400, /Request body should be JSON object/],
      [
        "/v1/models/add_sub:predict",
        "{",
        412,
        /^The file is not valid json - Error: Missing a name for object member\. Offset: 1$/,
      ],
      [
        "/v1/models/add_sub:predict",
        { inputs: { INPUT0: [[1, 2], [3]], INPUT1: [[1, 2]] } },
        400,
        /not a valid ndarray/,
      ],
      [
        "/v1/models/add_sub:predict",
        { instances: [{ INPUT0: [1, 2, 3, 4] }, { INPUT1: [1, 2, 3, 4] }] },
        400,
        /same inputs/,
      ],
      ["/v1/models/add_sub:predict", { inputs: [[1, 2, 3, 4]] }, 400, /has 2 inputs/],
      ["/v1/models/vad:predict", { instances: [{ sr: 16000 }] }, 400, /is stateful: send its inputs/],
      // OVMS's texts for a model or version not there, as its status answers say.
      ["/v1/models/nope:predict", { inputs: {} }, 404, /^Model with requested name is not found$/],
      [
        "/v1/models/add_sub/versions/9:predict",
        { inputs: {} },
        404,
        /^Model with requested version is not found$/,
      ],
      ["/v1/models/add_sub:classify", { inputs: {} }, 501, /classify is not served/],
    ];
    for (const [path, body, code, message] of cases) {
      const answer = await post(path, body);
      assert.equal(answer.status, code, `${path} ${JSON.stringify(body)}: ${JSON.stringify(answer.json)}`);
      assert.match(String(answer.json.error), message);
    }
    const metadata = await get("/v1/models/nope/metadata");
    assert.deepEqual([metadata.status, metadata.json.error], [404, "Model with requested name is not found"]);
    await assert.rejects(client.predict({ model_spec: { name: "nope" }, inputs: {} }), {
      code: status.NOT_FOUND,
      details: "Model with requested name is not found",
    });
  });
});

describe("gRPC Predict on stateless models", () => {
  const shape = (...dims: number[]) => ({ dim: dims.map((size) => ({ size })) });

  it("tensor_content in, tensor_content out; the model spec answered", async () => {
    const a = Int32Array.of(1, 2, 3, 4);
    const b = Int32Array.of(10, 10, 10, 10);
    const response = await client.predict({
      model_spec: { name: "add_sub", version: { value: 1 }, signature_name: "predict" },
      inputs: {
        INPUT0: { dtype: "DT_INT32", tensor_shape: shape(1, 4), tensor_content: Buffer.from(a.buffer) },
        INPUT1: { dtype: "DT_INT32", tensor_shape: shape(1, 4), int_val: [...b] },
      },
      // Neither is read, as OVMS reads neither: every output comes back.
      output_filter: ["OUTPUT0", "NO_SUCH_OUTPUT"],
    });
    assert.deepEqual(Object.keys(response.outputs).sort(), ["OUTPUT0", "OUTPUT1"]);
    const out = response.outputs.OUTPUT0!;
    assert.equal(out.dtype, "DT_INT32");
    assert.deepEqual(
      [...new Int32Array(Uint8Array.from(out.tensor_content as Buffer).buffer)],
      [11, 12, 13, 14],
    );
    assert.equal(response.model_spec.name, "add_sub");
    assert.equal(response.model_spec.version?.value, "1");
  });

  it("every typed field: float_val, half_val (FP16), string_val, and one value filling the shape", async () => {
    const floats = await client.predict({
      model_spec: { name: "one_float" },
      inputs: { INPUT0: { dtype: "DT_FLOAT", tensor_shape: shape(2, 3), float_val: [0.5] } },
    });
    const content = Uint8Array.from(floats.outputs.OUTPUT0!.tensor_content as Buffer);
    assert.deepEqual([...new Float32Array(content.buffer)], [0.5, 0.5, 0.5, 0.5, 0.5, 0.5]);

    // 1.0 and -2.0 as IEEE half bit patterns, widened to int32 as half_val carries them.
    const halves = await client.predict({
      model_spec: { name: "one_half" },
      inputs: { INPUT0: { dtype: "DT_HALF", tensor_shape: shape(1, 2), half_val: [0x3c00, 0xc000] } },
    });
    const half = Buffer.from(halves.outputs.OUTPUT0!.tensor_content as Buffer);
    assert.equal(halves.outputs.OUTPUT0!.dtype, "DT_HALF");
    assert.deepEqual([half.readUInt16LE(0), half.readUInt16LE(2)], [0x3c00, 0xc000]);

    const strings = await client.predict({
      model_spec: { name: "strings" },
      inputs: {
        INPUT0: {
          dtype: "DT_STRING",
          tensor_shape: shape(1, 2),
          string_val: [Buffer.from("α"), Buffer.from("β γ")],
        },
      },
    });
    const out = strings.outputs.OUTPUT0 as { string_val?: Buffer[] };
    assert.deepEqual(
      out.string_val?.map((b) => b.toString()),
      ["α", "β γ"],
    );
  });

  it("refuses a mismatched field, a wrong value count, a dtype it cannot serve", async () => {
    const cases: [object, RegExp][] = [
      [
        { dtype: "DT_FLOAT", tensor_shape: shape(1, 3), int_val: [1, 2, 3] },
        /sets int_val; its values belong in tensor_content or float_val/,
      ],
      [
        { dtype: "DT_FLOAT", tensor_shape: shape(1, 3), float_val: [1, 2] },
        /2 values in float_val, but its shape needs 3/,
      ],
      [
        { dtype: "DT_FLOAT", tensor_shape: shape(1, 3), tensor_content: Buffer.alloc(8) },
        /unexpected total byte size 8/,
      ],
      [
        { dtype: "DT_COMPLEX64", tensor_shape: shape(1, 3), scomplex_val: [1, 2] },
        /DT_COMPLEX64, which seqserve does not serve/,
      ],
      [{ dtype: "DT_FLOAT", tensor_shape: shape(1, 3) }, /carries no values/],
    ];
    for (const [tensor, message] of cases) {
      const error = await client
        .predict({ model_spec: { name: "one_float" }, inputs: { INPUT0: tensor } })
        .then(
          () => assert.fail("accepted"),
          (e: { code: number; details: string }) => e,
        );
      assert.equal(error.code, status.INVALID_ARGUMENT);
      assert.match(error.details, message);
    }
    const missing = await client.predict({ model_spec: { name: "nope" }, inputs: {} }).then(
      () => assert.fail("accepted"),
      (e: { code: number }) => e,
    );
    assert.equal(missing.code, status.NOT_FOUND);
  });
});

describe("model status and metadata", () => {
  it("REST status, of the model and of a version; GET /v1/config for all", async () => {
    const expected = {
      model_version_status: [
        { version: "1", state: "AVAILABLE", status: { error_code: "OK", error_message: "OK" } },
      ],
    };
    assert.deepEqual((await get("/v1/models/add_sub")).json, expected);
    assert.deepEqual((await get("/v1/models/add_sub/versions/1")).json, expected);
    const missing = await get("/v1/models/add_sub/versions/3");
    assert.deepEqual(
      [missing.status, missing.json.error],
      [404, "Model with requested version is not found"],
    );
    const none = await get("/v1/models/nope");
    assert.deepEqual([none.status, none.json.error], [404, "Model with requested name is not found"]);
    // A path is percent-decoded once: "%2562" names "%62", no model (not "add_sub"), and a
    // "%" left after decoding is a character of the name, not a malformed escape.
    for (const path of ["/v1/models/add_su%2562", "/v1/models/%25E0", "/v1/models/add_sub/labels/%25E0x"]) {
      const answer = await get(path);
      assert.equal(
        answer.status,
        path.includes("labels") ? 200 : 404,
        `${path}: ${JSON.stringify(answer.json)}`,
      );
    }
    const all = (await get("/v1/config")).json;
    assert.deepEqual(Object.keys(all).sort(), [
      "add_sub",
      "divide",
      "float_scalar",
      "ids",
      "one_float",
      "one_half",
      "raw_bytes",
      "row_scalars",
      "string_scalar",
      "strings",
      "unsigned_ids",
      "vad",
    ]);
    assert.deepEqual(all.vad, expected);
  });

  it("REST metadata: the signature_def, as OVMS writes it", async () => {
    const answer = await get("/v1/models/add_sub/versions/1/metadata");
    const dims = [
      { size: "-1", name: "" },
      { size: "4", name: "" },
    ];
    const info = (name: string) => ({
      name,
      dtype: "DT_INT32",
      tensorShape: { dim: dims, unknownRank: false },
    });
    assert.deepEqual(answer.json, {
      modelSpec: { name: "add_sub", signatureName: "", version: "1" },
      metadata: {
        signature_def: {
          "@type": "type.googleapis.com/tensorflow.serving.SignatureDefMap",
          signatureDef: {
            serving_default: {
              inputs: { INPUT0: info("INPUT0"), INPUT1: info("INPUT1") },
              outputs: { OUTPUT0: info("OUTPUT0"), OUTPUT1: info("OUTPUT1") },
              // OVMS never sets it, and prints primitive fields: "".
              methodName: "",
              defaults: {},
            },
          },
        },
      },
    });
  });

  it("gRPC HandleReloadConfigRequest answers success and applies nothing, as OVMS does", async () => {
    // TF-Serving would serve only the models listed; OVMS reloads its own config files.
    const answer = await client.call(MODEL_SERVICE_NAME, "HandleReloadConfigRequest", {
      config: {
        model_config_list: {
          config: [
            {
              name: "vad",
              base_path: "/models/vad",
              model_platform: "openvino",
              model_version_policy: { specific: { versions: ["1"] } },
            },
          ],
        },
      },
    });
    assert.deepEqual(answer, { metric: [] });
    const addSub = await client.status<{ model_version_status: { state: string }[] }>({
      model_spec: { name: "add_sub" },
    });
    assert.deepEqual(
      addSub.model_version_status.map((s) => s.state),
      ["AVAILABLE"],
    );
  });

  it("gRPC GetModelStatus and GetModelMetadata (a SignatureDefMap in an Any)", async () => {
    const statusAnswer = await client.status<{ model_version_status: object[] }>({
      model_spec: { name: "vad" },
    });
    assert.deepEqual(statusAnswer.model_version_status, [
      { version: "1", state: "AVAILABLE", status: { error_code: "OK", error_message: "OK" } },
    ]);
    const metadata = await client.metadata<{
      model_spec: { name: string; version: { value: string } };
      metadata: { signature_def: { type_url: string; value: Buffer } };
    }>({ model_spec: { name: "vad" }, metadata_field: ["signature_def"] });
    assert.equal(metadata.model_spec.version.value, "1");
    const any = metadata.metadata.signature_def;
    assert.equal(any.type_url, "type.googleapis.com/tensorflow.serving.SignatureDefMap");
    const map = tfsTypes().lookupType("tensorflow.serving.SignatureDefMap");
    const decoded = map.toObject(map.decode(any.value), { longs: String, enums: String }) as {
      signature_def: Record<string, { inputs: Record<string, unknown>; method_name: string }>;
    };
    const signature = decoded.signature_def.serving_default!;
    // OVMS never sets method_name: an empty proto3 string, absent from the wire.
    assert.equal(Object.hasOwn(signature, "method_name"), false);
    assert.deepEqual(signature.inputs.input, {
      name: "input",
      dtype: "DT_FLOAT",
      tensor_shape: { dim: [{ size: "-1" }, { size: "-1" }] },
    });
    assert.deepEqual(
      Object.keys(signature.inputs).sort(),
      ["input", "sr"],
      "special inputs are not model inputs",
    );
    assert.deepEqual(
      signature.inputs.sr,
      { name: "sr", dtype: "DT_INT64", tensor_shape: {} },
      "the model's scalar has no dimensions, as in OVMS (the config, in Triton's form, has [1])",
    );
    const refused = await client.metadata({ model_spec: { name: "vad" }, metadata_field: ["other"] }).then(
      () => assert.fail("accepted"),
      (e: { code: number }) => e,
    );
    assert.equal(refused.code, status.INVALID_ARGUMENT);
  });
});
