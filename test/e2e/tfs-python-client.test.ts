import assert from "node:assert/strict";
import { execFileSync, spawn } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { PROTO_DIR } from "../../src/frontends/grpc/proto-definitions.ts";
import { pythonClient } from "../support/python-client.ts";
import { expectedBits, firstMismatch, fp32Bits, sequenceAudio } from "../support/silero-oracle.ts";
import { type OvmsServer, SILERO_OVMS, startOvmsServer } from "../tfs/support/ovms-server.ts";

// The OVMS stateful-models guide's own client, in Python: TensorFlow's make_tensor_proto
// and make_ndarray, TensorFlow's TensorProto classes, and PredictionService stubs that
// grpcio-tools compiles from seqserve's tensorflow_serving protos (which import
// TensorFlow's own tensor.proto from the installed TensorFlow). The Python comes from
// test/support/python-client.ts; where there is none the test is skipped, saying why, and
// the npm-based tests cover the same API without Python.

const CHUNKS = 12;

const CLIENT = `
import json, sys
import numpy as np
import grpc
from tensorflow import make_tensor_proto, make_ndarray
from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

port, chunks = sys.argv[1], json.load(sys.stdin)
channel = grpc.insecure_channel(f"127.0.0.1:{port}", options=[("grpc.enable_http_proxy", 0)])
stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
SEQUENCE_START, SEQUENCE_END = 1, 2
sequence_id, outputs = 0, []
for i, chunk in enumerate(chunks):
    request = predict_pb2.PredictRequest()
    request.model_spec.name = "vad"
    request.inputs["input"].CopyFrom(make_tensor_proto(np.array([chunk], dtype=np.float32)))
    request.inputs["sr"].CopyFrom(make_tensor_proto([16000], dtype="int64"))
    if i == 0:
        request.inputs["sequence_control_input"].CopyFrom(make_tensor_proto([SEQUENCE_START], dtype="uint32"))
    else:
        request.inputs["sequence_id"].CopyFrom(make_tensor_proto([sequence_id], dtype="uint64"))
        if i == len(chunks) - 1:
            request.inputs["sequence_control_input"].CopyFrom(make_tensor_proto([SEQUENCE_END], dtype="uint32"))
    response = stub.Predict(request, 10.0)
    sequence_id = response.outputs["sequence_id"].uint64_val[0]
    outputs.append(float(make_ndarray(response.outputs["output"])[0][0]))
print(json.dumps({"sequence_id": str(sequence_id), "outputs": outputs}))
`;

const found = pythonClient("tensorflow");
let ovms: OvmsServer;
let dir: string;
before(async () => {
  if (!("python" in found)) return;
  ovms = await startOvmsServer({ vad: SILERO_OVMS });
  dir = mkdtempSync(join(tmpdir(), "seqserve-python-"));
  execFileSync(found.python, [
    "-m",
    "grpc_tools.protoc",
    `-I${PROTO_DIR}`,
    `--python_out=${dir}`,
    `--grpc_python_out=${dir}`,
    "tensorflow_serving/apis/model.proto",
    "tensorflow_serving/apis/predict.proto",
    "tensorflow_serving/apis/get_model_metadata.proto",
    "tensorflow_serving/apis/prediction_service.proto",
  ]);
  writeFileSync(join(dir, "client.py"), CLIENT);
});
after(async () => {
  if (!("python" in found)) return;
  await ovms.stop();
  rmSync(dir, { recursive: true, force: true });
});

test("the OVMS guide's Python client (make_tensor_proto, TF-Serving stubs) runs a Silero VAD sequence exactly", {
  timeout: 180_000,
  skip: "reason" in found ? found.reason : false,
}, async () => {
  if (!("python" in found)) return;
  const audio = sequenceAudio(42, CHUNKS);
  // Asynchronously: the server answering the client runs in this process.
  const run = await new Promise<{ status: number | null; stdout: string; stderr: string }>(
    (resolve, reject) => {
      const child = spawn(found.python, [join(dir, "client.py"), String(ovms.grpcPort)], {
        env: { ...process.env, PYTHONPATH: dir, TF_CPP_MIN_LOG_LEVEL: "3" },
      });
      let stdout = "";
      let stderr = "";
      child.stdout.setEncoding("utf8").on("data", (chunk: string) => (stdout += chunk));
      child.stderr.setEncoding("utf8").on("data", (chunk: string) => (stderr += chunk));
      child.once("error", reject);
      child.once("close", (status) => resolve({ status, stdout, stderr }));
      child.stdin.end(JSON.stringify(audio.map((chunk) => Array.from(chunk))));
    },
  );
  assert.equal(run.status, 0, run.stderr);
  const answer = JSON.parse(run.stdout.trim().split("\n").pop()!) as {
    sequence_id: string;
    outputs: number[];
  };
  assert.ok(BigInt(answer.sequence_id) > 0n, "the server assigned the id the client then used");
  const [expected] = await expectedBits([audio]);
  const mismatch = firstMismatch(0, answer.outputs.map(fp32Bits), expected!);
  assert.equal(mismatch, undefined, mismatch);
});
