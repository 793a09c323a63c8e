import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import type { SageMakerRuntimeClient } from "@aws-sdk/client-sagemaker-runtime";
import { OFF_THREAD_JSON_ELEMENTS } from "../../src/frontends/json-thread/json-thread.ts";
import { identityModel } from "../../tools/onnx/test-models.ts";
import { invoke, sdkClient } from "../sagemaker/support/sagemaker-kit.ts";
import { postText } from "../support/http-client.ts";
import { startTestServer, type TestServer } from "../support/test-server.ts";
import { StreamClient } from "./support/ws-client.ts";

// A float output's -0 is written "-0.0", as Triton's rapidjson writes it, on every path
// that writes KServe JSON: "-0" is read as the integer 0 by Python's json and by
// python-rapidjson (tritonclient's reader), so a Python client got +0.0 (bits 0x00000000,
// not 0x80000000).

let server: TestServer;
let sagemaker: SageMakerRuntimeClient;
before(async () => {
  server = await startTestServer(
    { fp32: { config: "max_batch_size: 0", onnx: identityModel("FP32", [-1]) } },
    { sagemakerPort: 0 },
  );
  sagemaker = sdkClient(server.server.sagemakerPort!);
});
after(async () => {
  sagemaker?.destroy();
  await server?.stop();
});

/** A KServe request of `values` as the model's FP32 input. */
const request = (values: string) =>
  `{"inputs":[{"name":"INPUT0","datatype":"FP32","shape":[${values.split(",").length}],"data":[${values}]}]}`;

/** The output's data as the answer's text has it. */
const dataText = (answer: string) => /"data":\[([^\]]*)\]/.exec(answer)?.[1];

test("KServe over HTTP: -0 is written -0.0, alone, among others, first and last", async () => {
  const answer = await postText(`${server.url}/v2/models/fp32/infer`, request("-0.0,1.5,-0,0,-0"));
  assert.equal(answer.status, 200, answer.text);
  assert.equal(dataText(answer.text), "-0.0,1.5,-0.0,0,-0.0");
});

test("KServe over HTTP, an answer written off the event loop: -0 is written -0.0", async () => {
  const values = Array.from({ length: OFF_THREAD_JSON_ELEMENTS }, (_, i) => (i % 1000 === 7 ? "-0" : "0.5"));
  const answer = await postText(`${server.url}/v2/models/fp32/infer`, request(values.join(",")));
  assert.equal(answer.status, 200, answer.text.slice(0, 200));
  assert.equal(dataText(answer.text), values.map((v) => (v === "-0" ? "-0.0" : v)).join(","));
});

test("KServe over WebSocket, a text answer: -0 is written -0.0", async () => {
  const client = await StreamClient.open(
    { port: Number(new URL(server.url).port) },
    "/v2/models/fp32/stream",
  );
  try {
    client.send(request("2,-0"));
    const answer = await client.next();
    assert.equal(answer.binary, false);
    assert.equal(dataText(answer.data.toString("utf8")), "2,-0.0");
  } finally {
    await client.close();
  }
});

test("SageMaker, a bare array and a KServe object: -0 is written -0.0", async () => {
  for (const body of ["[-0,3]", request("-0,3")]) {
    const output = await invoke(sagemaker, { body });
    const text = Buffer.from(output.Body!).toString("utf8");
    assert.match(text, /\[-0\.0,3\]/, `${body}: ${text}`);
  }
});
