import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { after, before, test } from "node:test";
import type { SageMakerRuntimeClient } from "@aws-sdk/client-sagemaker-runtime";
import {
  jsonThreadBodies,
  OFF_THREAD_JSON_BYTES,
  OFF_THREAD_JSON_ELEMENTS,
} from "../../src/frontends/json-thread/json-thread.ts";
import { identityModel } from "../../tools/onnx/test-models.ts";
import { asFp32, assertRowsExact, floatRows, rowsText } from "../support/float-rows.ts";
import {
  expectedBits,
  firstMismatch,
  fp32Bits,
  SILERO_PATH,
  SILERO_STATEFUL_CONFIG,
  SILERO_STATEFUL_MODEL,
  sequenceAudio,
} from "../support/silero-oracle.ts";
import { startTestServer, type TestServer } from "../support/test-server.ts";
import {
  closeSession,
  containerMessage,
  invoke,
  jsonAnswer,
  openSession,
  type SdkError,
  sdkClient,
  sdkError,
  sileroJsonBody,
} from "./support/sagemaker-kit.ts";

// SageMaker invocation bodies of a MiB of JSON or more (up to the 6 MB SageMaker allows)
// are parsed, and answers of 65,536 elements or more written, on the JSON thread, as
// KServe's are: a bare array, a KServe v2 object, and a session's steps. The AWS SDK for
// JavaScript sees the same answers, exactly, and the same refusals as for small bodies.

let server: TestServer;
let client: SageMakerRuntimeClient;
before(async () => {
  server = await startTestServer(
    {
      fp32: { config: "max_batch_size: 0", onnx: identityModel("FP32", [-1, -1]) },
      int64: { config: "max_batch_size: 0", onnx: identityModel("INT64", [-1]) },
      [SILERO_STATEFUL_MODEL]: { config: SILERO_STATEFUL_CONFIG, onnx: readFileSync(SILERO_PATH) },
    },
    { sagemakerPort: 0, httpPort: 0 },
  );
  client = sdkClient(server.server.sagemakerPort!);
});
after(async () => {
  client?.destroy();
  await server?.stop();
});

test("a large bare array and a large KServe object answer every float exactly, off the event loop", async () => {
  const rows = floatRows(2, OFF_THREAD_JSON_ELEMENTS / 2);
  const array = rowsText(rows);
  const object = `{"inputs":[{"name":"INPUT0","datatype":"FP32","shape":[2,${rows[0]!.length}],"data":${array}}]}`;
  for (const body of [array, object]) {
    assert.ok(body.length >= OFF_THREAD_JSON_BYTES, `${body.length} bytes`);
    const before = jsonThreadBodies();
    const answer = jsonAnswer(await invoke(client, { body, targetModel: "fp32" }));
    const served = body === array ? answer : (answer as { outputs: { data: number[] }[] }).outputs[0]!.data;
    // The KServe answer's data is flat.
    assertRowsExact(
      body === array
        ? served
        : [(served as number[]).slice(0, rows[0]!.length), (served as number[]).slice(rows[0]!.length)],
      asFp32(rows),
      body === array ? "bare array" : "KServe object",
    );
    assert.equal(jsonThreadBodies() - before, 2, "parsed and written on the JSON thread");
  }
});

test("a large body refused is refused in the same words and status as a small one", async () => {
  const fillers = `${"0.5,".repeat(OFF_THREAD_JSON_BYTES / 4)}0.5`;
  const cases: [string, string][] = [
    // An element that is no number, after many that are.
    [`[[1,"two",3]]`, `[[${fillers},"two"]]`],
    // Lists that differ in length.
    ["[[1,2],[3]]", `[[${fillers}],[1]]`],
    // Nested deeper than JSON may be: refused before it is parsed.
    [
      `${"[".repeat(5000)}1${"]".repeat(5000)}`,
      `${"[".repeat(5000)}1${"]".repeat(5000)}${" ".repeat(OFF_THREAD_JSON_BYTES)}`,
    ],
    // Malformed JSON, the fault where V8 tells its position.
    ["[[1 2]]", `[[1 2]]${" ".repeat(OFF_THREAD_JSON_BYTES)}`],
    ['{"inputs":[{"name" 1}]}', `{"inputs":[{"name" 1}]}${" ".repeat(OFF_THREAD_JSON_BYTES)}`],
  ];
  for (const [i, [small, large]] of cases.entries()) {
    assert.ok(large.length >= OFF_THREAD_JSON_BYTES);
    const a = await sdkError(invoke(client, { body: small, targetModel: "fp32" }));
    const b = await sdkError(invoke(client, { body: large, targetModel: "fp32" }));
    assert.equal(a.originalStatus, 400, `case ${i}: ${a.message}`);
    // Indices and counts are the body's own.
    const words = (error: SdkError) => containerMessage(error).replace(/\d+/g, "N");
    assert.deepEqual([b.originalStatus, words(b)], [a.originalStatus, words(a)], `case ${i}`);
  }
});

test("INT64 past 2^53 in a bare array, small or large, is read from its digits", async () => {
  const values = ["9007199254740993", "-9223372036854775808", "9223372036854775807", "5"];
  const small = `[${values.join(",")}]`;
  const large = `${small}${" ".repeat(OFF_THREAD_JSON_BYTES)}`;
  for (const body of [small, large]) {
    const answer = await invoke(client, { body, targetModel: "int64" });
    assert.equal(Buffer.from(answer.Body!).toString(), small);
  }
});

test("a SageMaker session whose every step is a large body answers as the stateful oracle", {
  timeout: 120_000,
}, async () => {
  const audio = sequenceAudio(31, 10);
  const [expected] = await expectedBits([audio]);
  const session = await openSession(client, SILERO_STATEFUL_MODEL);
  const padding = "x".repeat(OFF_THREAD_JSON_BYTES);
  const served: number[] = [];
  const before = jsonThreadBodies();
  for (const chunk of audio) {
    const body = sileroJsonBody(chunk, { parameters: { padding } });
    const answer = jsonAnswer(
      await invoke(client, { body, sessionId: session.id, targetModel: SILERO_STATEFUL_MODEL }),
    );
    const outputs = (answer as { outputs: { name: string; data: number[] }[] }).outputs;
    served.push(fp32Bits(outputs.find((o) => o.name === "output")!.data[0]!));
  }
  assert.equal(firstMismatch(0, served, expected!), undefined);
  assert.ok(jsonThreadBodies() - before >= audio.length, "each step parsed on the JSON thread");
  assert.equal((await closeSession(client, session.id, SILERO_STATEFUL_MODEL)).ClosedSessionId, session.id);
});
