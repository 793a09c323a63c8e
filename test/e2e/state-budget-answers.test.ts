import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { type ServiceError, status } from "@grpc/grpc-js";
import { securityOptions } from "../../src/config/security-options.ts";
import { stateEntryBytes } from "../../src/core/sequence/state-store.ts";
import { growingStateConfig, growingStateModel } from "../../tools/onnx/sequence-models.ts";
import { infer, outputData, postJson } from "../support/http-client.ts";
import { startTestServer, type TestServer } from "../support/test-server.ts";
import { controlTensor, floatTensor, sequenceIdTensor, TfsClient } from "../tfs/support/tfs-client.ts";

// A step refused for --max-state-bytes is "the server is full now, retry later": room
// comes back as other sequences end. Each protocol family answers it with its own such
// answer, with a Retry-After (grpc-retry-pushback-ms): KServe keeps 429 /
// RESOURCE_EXHAUSTED (Triton has no such budget to match); the TF-Serving API answers as
// OVMS answers a full server, 503 / UNAVAILABLE; SageMaker 503 with the error type
// ServiceUnavailable (not ModelNotReadyException, which says the model is loading). A
// SageMaker session whose opening is refused is told that no sequence was started.

const MODEL = "growing";
/**
 * The growing model's state after a START, the whole budget: its CACHE entry as held in
 * memory (the entry's key and overhead, and its 8 bytes of data).
 */
const BUDGET = stateEntryBytes("CACHE", { datatype: "FP32", shape: [0], data: new Float32Array(0) }) + 8;
const FULL = `more than the server's sequence state memory has left (--max-state-bytes ${BUDGET}, for every model's sequences together): the sequence is not started`;

let server: TestServer;
let tfs: TfsClient;
before(async () => {
  server = await startTestServer(
    {
      [MODEL]: {
        config: growingStateConfig("max_sequence_idle_microseconds: 60000000"),
        onnx: growingStateModel(),
      },
    },
    {
      sagemakerPort: 0,
      sagemakerModel: MODEL,
      security: securityOptions({ limits: { ...securityOptions().limits, maxStateBytes: BUDGET } }),
    },
  );
  tfs = new TfsClient(server.grpcPort);
  // Sequence 1 takes the whole budget: no other sequence can start.
  const first = await infer(
    server.url,
    MODEL,
    [{ name: "INPUT", datatype: "FP32", shape: [1, 1], data: [1] }],
    {
      id: 1,
      start: true,
    },
  );
  assert.deepEqual(outputData(first, "OUTPUT"), [1]);
});
after(async () => {
  tfs.close();
  await server.stop();
});

test("KServe HTTP: 429 with Retry-After", async () => {
  const refused = await infer(
    server.url,
    MODEL,
    [{ name: "INPUT", datatype: "FP32", shape: [1, 1], data: [1] }],
    {
      id: 2,
      start: true,
    },
  );
  assert.equal(refused.status, 429, JSON.stringify(refused.body));
  assert.equal(refused.headers["retry-after"], "1");
  assert.deepEqual(refused.body, {
    error: `the state of a new sequence 2 of model '${MODEL}' would hold ${BUDGET} bytes, ${FULL}`,
  });
});

test("TF-Serving REST: OVMS's 503 with Retry-After, in seqserve's words", async () => {
  const refused = await postJson(`${server.url}/v1/models/${MODEL}:predict`, {
    inputs: { INPUT: [[1]], sequence_id: [3], sequence_control_input: [1] },
  });
  assert.equal(refused.status, 503, JSON.stringify(refused.body));
  assert.equal(refused.headers["retry-after"], "1");
  assert.deepEqual(refused.body, {
    error: `the state of a new sequence 3 of model '${MODEL}' would hold ${BUDGET} bytes, ${FULL}`,
  });
});

test("TF-Serving gRPC: UNAVAILABLE with grpc-retry-pushback-ms", async () => {
  const error = (await tfs
    .predict({
      model_spec: { name: MODEL },
      inputs: {
        INPUT: floatTensor(new Float32Array([1]), [1, 1]),
        sequence_id: sequenceIdTensor(4n),
        sequence_control_input: controlTensor(1),
      },
    })
    .then(
      () => assert.fail("the START was not refused"),
      (e: unknown) => e,
    )) as ServiceError;
  assert.equal(error.code, status.UNAVAILABLE, error.details);
  assert.deepEqual(error.metadata.get("grpc-retry-pushback-ms"), ["1000"]);
  assert.equal(
    error.details,
    `the state of a new sequence 4 of model '${MODEL}' would hold ${BUDGET} bytes, ${FULL}`,
  );
});

test("SageMaker: a session's opening refused is 503 ServiceUnavailable with Retry-After, and starts nothing", async () => {
  const response = await fetch(`http://127.0.0.1:${server.server.sagemakerPort!}/invocations`, {
    method: "POST",
    headers: { "content-type": "application/json", "x-amzn-sagemaker-session-id": "NEW_SESSION" },
    body: JSON.stringify({ inputs: [{ name: "INPUT", datatype: "FP32", shape: [1, 1], data: [1] }] }),
  });
  const body = (await response.json()) as { error: string; message: string };
  assert.equal(response.status, 503, JSON.stringify(body));
  assert.equal(response.headers.get("x-amzn-errortype"), "ServiceUnavailable");
  assert.equal(response.headers.get("retry-after"), "1");
  assert.match(
    body.message,
    new RegExp(`^the state of a new sequence \\S+ of model 'growing' would hold ${BUDGET} bytes, `),
  );
  assert.ok(body.message.endsWith(FULL), body.message);
});
