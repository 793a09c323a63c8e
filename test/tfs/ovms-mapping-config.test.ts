import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { addSubModel } from "../../tools/onnx/test-models.ts";
import { type LogLine, memoryLogger } from "../security/support/memory-logger.ts";
import { getJson, postJson } from "../support/http-client.ts";
import { SILERO_PATH, sequenceAudio } from "../support/silero-oracle.ts";
import { type OvmsServer, startOvmsServer } from "./support/ovms-server.ts";
import {
  controlTensor,
  floatOutput,
  floatTensor,
  int64Tensor,
  responseSequenceId,
  sequenceIdTensor,
  TfsClient,
} from "./support/tfs-client.ts";

// OVMS's mapping_config.json in a version folder gives a model's tensors the names its
// clients use: TF-Serving REST and gRPC, and the KServe API, take and answer those names,
// the metadata shows them, and the model runs with its own. A stateful model's state keeps
// working (its pairs are found by the model's names), and sequence_id and
// sequence_control_input are not mapped. A file that is not valid is logged, and the
// model keeps its own names, as OVMS serves it; one that gives two tensors one name
// refuses the load.

const ADD_SUB_MAPPING = JSON.stringify({
  inputs: { INPUT0: "first", INPUT1: "second" },
  outputs: { OUTPUT0: "sum" },
});
// The state input renamed out of the naming rule (memory / stateN): the pair is the model's.
const VAD_MAPPING = JSON.stringify({
  inputs: { input: "audio", state: "memory" },
  outputs: { output: "speech" },
});

const lines: LogLine[] = [];
let ovms: OvmsServer;
let client: TfsClient;
before(async () => {
  ovms = await startOvmsServer(
    {
      mapped: {
        onnx: addSubModel("INT32", [-1, 2]),
        versionFiles: { "mapping_config.json": ADD_SUB_MAPPING },
      },
      vad: { config: { stateful: true }, onnx: SILERO_PATH },
      vad_mapped: {
        config: { stateful: true },
        onnx: SILERO_PATH,
        versionFiles: { "mapping_config.json": VAD_MAPPING },
      },
      // A data input named as seqserve's numbered-step special input: the model keeps it.
      vad_step: {
        config: { stateful: true },
        onnx: SILERO_PATH,
        versionFiles: { "mapping_config.json": JSON.stringify({ inputs: { input: "sequence_step" } }) },
      },
      unreadable: {
        onnx: addSubModel("INT32", [-1, 2]),
        versionFiles: { "mapping_config.json": "{inputs:" },
      },
      clash: {
        onnx: addSubModel("INT32", [-1, 2]),
        versionFiles: { "mapping_config.json": JSON.stringify({ inputs: { INPUT0: "INPUT1" } }) },
      },
    },
    { exitOnError: false },
    memoryLogger(lines),
  );
  client = new TfsClient(ovms.grpcPort);
});
after(async () => {
  client.close();
  await ovms.stop();
});

test("TF-Serving REST and gRPC take and answer the mapped names; the model's own are refused", async () => {
  const rest = await postJson(`${ovms.url}/v1/models/mapped:predict`, {
    inputs: { first: [[5, 7]], second: [[1, 2]] },
  });
  assert.deepEqual([rest.status, rest.body], [200, { outputs: { sum: [[6, 9]], OUTPUT1: [[4, 5]] } }]);
  const own = await postJson(`${ovms.url}/v1/models/mapped:predict`, {
    inputs: { INPUT0: [[5, 7]], INPUT1: [[1, 2]] },
  });
  assert.equal(own.status, 400, JSON.stringify(own.body));
  const int32 = (values: number[]) => ({
    dtype: "DT_INT32",
    tensor_shape: { dim: [{ size: 1 }, { size: values.length }] },
    int_val: values,
  });
  const grpc = await client.predict({
    model_spec: { name: "mapped" },
    inputs: { first: int32([5, 7]), second: int32([1, 2]) },
  });
  assert.deepEqual(Object.keys(grpc.outputs).sort(), ["OUTPUT1", "sum"]);
});

test("the metadata shows the mapped names, over TF-Serving REST and the KServe API, which infers with them", async () => {
  const tfs = (await getJson(`${ovms.url}/v1/models/mapped/metadata`)).body as {
    metadata: { signature_def: { signatureDef: Record<string, Record<string, Record<string, unknown>>> } };
  };
  const signature = tfs.metadata.signature_def.signatureDef.serving_default!;
  assert.deepEqual(Object.keys(signature.inputs!).sort(), ["first", "second"]);
  assert.deepEqual(Object.keys(signature.outputs!).sort(), ["OUTPUT1", "sum"]);
  const kserve = (await getJson(`${ovms.url}/v2/models/mapped`)).body as {
    inputs: { name: string }[];
    outputs: { name: string }[];
  };
  assert.deepEqual(kserve.inputs.map((i) => i.name).sort(), ["first", "second"]);
  assert.deepEqual(kserve.outputs.map((o) => o.name).sort(), ["OUTPUT1", "sum"]);
  const infer = await postJson(`${ovms.url}/v2/models/mapped/infer`, {
    inputs: [
      { name: "first", datatype: "INT32", shape: [1, 2], data: [5, 7] },
      { name: "second", datatype: "INT32", shape: [1, 2], data: [1, 2] },
    ],
    outputs: [{ name: "sum" }],
  });
  assert.equal(infer.status, 200, JSON.stringify(infer.body));
  const outputs = (infer.body as { outputs: { name: string; data: number[] }[] }).outputs;
  assert.deepEqual(
    outputs.map((o) => [o.name, o.data]),
    [["sum", [6, 9]]],
  );
});

test("a stateful model with mapped names keeps its state: its answers are the unmapped model's, step by step", async () => {
  const audio = sequenceAudio(3, 6);
  const step = async (model: string, names: { input: string; output: string }, id: bigint, i: number) => {
    const control = i === 0 ? 1 : i === audio.length - 1 ? 2 : undefined;
    const response = await client.predict({
      model_spec: { name: model },
      inputs: {
        [names.input]: floatTensor(audio[i]!, [1, audio[i]!.length]),
        sr: int64Tensor([16000n], [1]),
        sequence_id: sequenceIdTensor(id),
        ...(control === undefined ? {} : { sequence_control_input: controlTensor(control) }),
      },
    });
    assert.equal(responseSequenceId(response), id);
    return floatOutput(response, names.output)[0]!;
  };
  const plain: number[] = [];
  const mapped: number[] = [];
  for (let i = 0; i < audio.length; i++) {
    plain.push(await step("vad", { input: "input", output: "output" }, 41n, i));
    mapped.push(await step("vad_mapped", { input: "audio", output: "speech" }, 42n, i));
  }
  assert.deepEqual(mapped, plain);
  assert.ok(new Set(plain).size > 1, "the answers vary along the sequence");
});

test("a stateful model with a data input named sequence_step keeps it over TF-Serving gRPC and REST: OVMS reserves only its two special inputs", async () => {
  const audio = sequenceAudio(4, 4);
  const grpcStep = async (model: string, input: string, id: bigint, i: number) => {
    const control = i === 0 ? 1 : i === audio.length - 1 ? 2 : undefined;
    const response = await client.predict({
      model_spec: { name: model },
      inputs: {
        [input]: floatTensor(audio[i]!, [1, audio[i]!.length]),
        sr: int64Tensor([16000n], [1]),
        sequence_id: sequenceIdTensor(id),
        ...(control === undefined ? {} : { sequence_control_input: controlTensor(control) }),
      },
    });
    return floatOutput(response, "output")[0]!;
  };
  const restStep = async (id: number, i: number) => {
    const control = i === 0 ? 1 : i === audio.length - 1 ? 2 : 0;
    const answer = await postJson(`${ovms.url}/v1/models/vad_step:predict`, {
      inputs: {
        sequence_step: [Array.from(audio[i]!)],
        sr: [16000],
        sequence_id: [id],
        sequence_control_input: [control],
      },
    });
    assert.equal(answer.status, 200, JSON.stringify(answer.body));
    return (answer.body as { outputs: { output: number[][] } }).outputs.output[0]![0]!;
  };
  const plain: number[] = [];
  const overGrpc: number[] = [];
  const overRest: number[] = [];
  for (let i = 0; i < audio.length; i++) {
    plain.push(await grpcStep("vad", "input", 51n, i));
    overGrpc.push(await grpcStep("vad_step", "sequence_step", 52n, i));
    overRest.push(await restStep(53, i));
  }
  assert.deepEqual(overGrpc, plain);
  assert.deepEqual(overRest.map(Math.fround), plain.map(Math.fround));
  assert.ok(new Set(plain).size > 1, "the answers vary along the sequence");
});

test("a mapping_config.json that is not valid JSON is logged, and the model keeps its own names", async () => {
  const own = await postJson(`${ovms.url}/v1/models/unreadable:predict`, {
    inputs: { INPUT0: [[5, 7]], INPUT1: [[1, 2]] },
  });
  assert.deepEqual([own.status, own.body], [200, { outputs: { OUTPUT0: [[6, 9]], OUTPUT1: [[4, 5]] } }]);
  const logged = lines.filter((l) => l.event === "mapping_config" && l.model === "unreadable");
  assert.equal(logged.length, 1);
  assert.match(
    String(logged[0]!.msg),
    /^model 'unreadable' version 1: '.*mapping_config\.json' is not a valid JSON file; its inputs and outputs keep the model's names$/,
  );
});

test("a mapping that gives two inputs one name refuses the load, naming the file", async () => {
  const status = (await getJson(`${ovms.url}/v1/models/clash`)).body as {
    model_version_status: { state: string; status: { error_message: string } }[];
  };
  const version = status.model_version_status[0];
  assert.equal(version?.state, "LOADING");
  assert.match(
    version?.status.error_message ?? "",
    /^model 'clash': '.*mapping_config\.json' gives inputs 'INPUT0' and 'INPUT1' the same name 'INPUT1'$/,
  );
});
