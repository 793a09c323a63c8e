import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { accumulatorConfig, accumulatorModel } from "../../tools/onnx/sequence-models.ts";
import { identityModel } from "../../tools/onnx/test-models.ts";
import { postText } from "../support/http-client.ts";
import { startTestServer, type TestServer } from "../support/test-server.ts";

// Triton's generate extension reads its body with JSON.parse, whose doubles round integers
// past 2^53: 64-bit input elements and sequence ids are read again from their digits, as
// KServe's /infer reads them; NaN and the infinities as Triton's rapidjson reads them.
// Bodies are sent and answers read as text for the same reasons.

let server: TestServer;
before(async () => {
  server = await startTestServer({
    int64: { onnx: identityModel("INT64", [-1]) },
    fp32: { onnx: identityModel("FP32", [-1]) },
    acc: {
      config: accumulatorConfig("acc", 4, "max_sequence_idle_microseconds: 60000000"),
      onnx: accumulatorModel(),
    },
  });
});
after(() => server?.stop());

const generate = (model: string, body: string) => postText(`${server.url}/v2/models/${model}/generate`, body);

/** The accumulator's running sum in a /generate answer (fails with the answer otherwise). */
async function accumulate(body: string): Promise<number> {
  const answer = await generate("acc", body);
  assert.equal(answer.status, 200, answer.text);
  return (JSON.parse(answer.text) as { OUTPUT: number }).OUTPUT;
}

test("INT64 inputs past 2^53 are read exactly, as a value, a list or a member of 'parameters'", async () => {
  for (const [body, output] of [
    ['{"INPUT0": 9007199254740993}', "9007199254740993"],
    ['{"INPUT0": [1, 9007199254740993, -9223372036854775807]}', "[1,9007199254740993,-9223372036854775807]"],
    ['{"parameters": {"INPUT0": [9223372036854775807]}}', "9223372036854775807"],
  ] as const) {
    const answer = await generate("int64", body);
    assert.equal(answer.status, 200, answer.text);
    assert.match(answer.text, new RegExp(`"OUTPUT0":${output.replace(/[[\]]/g, "\\$&")}[,}]`), body);
  }
});

test("NaN and the infinities are read and written as over /infer, in inputs and parameters", async () => {
  const answer = await generate("fp32", '{"INPUT0": [1, NaN, -Infinity], "threshold": Inf}');
  assert.equal(answer.status, 200, answer.text);
  assert.match(answer.text, /"OUTPUT0":\[1,NaN,-Infinity\][,}]/);
});

test("a server-assigned sequence id, and a client's uint64 id past 2^53, go on over /generate", async () => {
  const started = await generate("acc", '{"INPUT": 5, "sequence_start": true}');
  assert.equal(started.status, 200, started.text);
  const id = /"sequence_id":(\d+)/.exec(started.text)?.[1];
  // From 2^52: away from the ids clients pick, and exact in a double (JSON.parse keeps it).
  assert.ok(id !== undefined && BigInt(id) >= 2n ** 52n, started.text);
  assert.equal(BigInt((JSON.parse(started.text) as { sequence_id: number }).sequence_id), BigInt(id));
  assert.equal(await accumulate(`{"INPUT": 3, "sequence_id": ${id}}`), 8);
  assert.equal(
    await accumulate(`{"INPUT": 1, "parameters": {"sequence_id": ${id}, "sequence_end": true}}`),
    9,
  );

  // Two ids a double cannot tell apart are two sequences.
  const big = "9007199254740993";
  assert.equal(await accumulate(`{"INPUT": 1, "sequence_id": ${big}, "sequence_start": true}`), 1);
  assert.equal(
    await accumulate('{"INPUT": 100, "sequence_id": 9007199254740992, "sequence_start": true}'),
    100,
  );
  assert.equal(
    await accumulate(`{"INPUT": 2, "parameters": {"sequence_id": ${big}}, "sequence_end": true}`),
    3,
  );
});

test("a sequence id written as a fraction or with an exponent is refused, as over /infer", async () => {
  for (const body of [
    '{"INPUT": 1, "sequence_id": 1.0, "sequence_start": true}',
    '{"INPUT": 1, "parameters": {"sequence_id": 1e3, "sequence_start": true}}',
    // NaN is a number to Triton's reader (never a string id).
    '{"INPUT": 1, "sequence_id": NaN, "sequence_start": true}',
  ]) {
    assert.deepEqual(await generate("acc", body), {
      status: 400,
      text: JSON.stringify({
        error: "Unable to parse 'sequence_id': attempt to access JSON non-string as string",
      }),
    });
  }
  // The same id written as an integer starts a sequence.
  assert.equal(
    await accumulate('{"INPUT": 4, "sequence_id": 1000, "sequence_start": true, "sequence_end": true}'),
    4,
  );
});
