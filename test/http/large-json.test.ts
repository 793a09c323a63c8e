import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { parseRequestJson } from "../../src/frontends/common/json-syntax.ts";
import {
  jsonThreadBodies,
  OFF_THREAD_JSON_BYTES,
  OFF_THREAD_JSON_ELEMENTS,
} from "../../src/frontends/json-thread/json-thread.ts";
import { identityModel } from "../../tools/onnx/test-models.ts";
import { postText } from "../support/http-client.ts";
import { startTestServer, type TestServer } from "../support/test-server.ts";

// Request bodies of a MiB of JSON or more are parsed, and responses of 65,536 JSON
// elements or more written, on the JSON thread (json-thread.ts), not on the event loop.
// What a client sees is the same either way: the same outputs, exactly, and the same
// refusals in the same words.

let server: TestServer;

before(async () => {
  server = await startTestServer({
    fp32: { config: "max_batch_size: 0", onnx: identityModel("FP32", [-1]) },
    int64: { config: "max_batch_size: 0", onnx: identityModel("INT64", [-1]) },
    bytes: { config: "max_batch_size: 0", onnx: identityModel("BYTES", [-1]) },
  });
});

after(() => server.stop());

const post = (model: string, body: string) => postText(`${server.url}/v2/models/${model}/infer`, body);

/** A parameter that makes a body `bytes` long at least, whatever else it holds. */
const padding = (bytes: number) => `"padding":"${"x".repeat(bytes)}"`;

test("a large body of floats, flat or nested, is answered with each float exactly", async () => {
  const count = OFF_THREAD_JSON_ELEMENTS * 2;
  const values = Array.from({ length: count }, (_, i) => ((i * 7919) % 10007) / 997 - 5);
  values[3] = -0;
  const text = (part: readonly number[]) => part.map((v) => (Object.is(v, -0) ? "-0" : String(v))).join(",");
  const flat = `{"inputs":[{"name":"INPUT0","datatype":"FP32","shape":[${count}],"data":[${text(values)}]}]}`;
  const halves = `[${text(values.slice(0, count / 2))}],[${text(values.slice(count / 2))}]`;
  const nested = `{"inputs":[{"name":"INPUT0","datatype":"FP32","shape":[${count}],"data":[${halves}]}]}`;
  const before = jsonThreadBodies();
  for (const body of [flat, nested]) {
    assert.ok(body.length >= OFF_THREAD_JSON_BYTES, `${body.length} bytes`);
    const answer = await post("fp32", body);
    assert.equal(answer.status, 200, answer.text.slice(0, 200));
    const data = (JSON.parse(answer.text) as { outputs: { data: number[] }[] }).outputs[0]!.data;
    assert.equal(data.length, count);
    const wrong = data.findIndex((v, i) => !Object.is(v, Math.fround(values[i]!)));
    assert.equal(wrong, -1, `element ${wrong}: ${data[wrong]} for ${values[wrong]}`);
  }
  assert.equal(
    jsonThreadBodies() - before,
    4,
    "each request parsed, and each answer written, on the JSON thread",
  );
});

test("INT64 elements past 2^53 in a large body are read from their digits, exactly", async () => {
  const values = ["9007199254740993", "-9223372036854775808", "9223372036854775807", "12345"];
  const body = `{"parameters":{${padding(OFF_THREAD_JSON_BYTES)}},"inputs":[{"name":"INPUT0","datatype":"INT64","shape":[4],"data":[${values.join(",")}]}]}`;
  const answer = await post("int64", body);
  assert.equal(answer.status, 200, answer.text.slice(0, 200));
  assert.match(answer.text, new RegExp(`"data":\\[${values.join(",")}\\]`));
});

test("a large body of strings is answered with each string exactly; one with a lone surrogate is refused", async () => {
  const strings = Array.from(
    { length: 2048 },
    (_, i) => `${["é", "", '"quoted"', "tab\t", "plain"][i % 5]}${i}`,
  );
  for (const odd of [undefined, "\ud800"]) {
    const data = odd === undefined ? strings : [...strings.slice(0, -1), odd];
    const body = `{"parameters":{${padding(OFF_THREAD_JSON_BYTES)}},"inputs":[{"name":"INPUT0","datatype":"BYTES","shape":[${data.length}],"data":${JSON.stringify(data)}}]}`;
    const before = jsonThreadBodies();
    const answer = await post("bytes", body);
    assert.ok(jsonThreadBodies() > before, "parsed on the JSON thread");
    if (odd !== undefined) {
      // A lone surrogate cannot travel as UTF-8, as a small body's cannot (json-not-utf8.test.ts).
      assert.equal(answer.status, 400, answer.text.slice(0, 200));
      assert.deepEqual(JSON.parse(answer.text), {
        error: `unable to parse 'data' for input 'INPUT0': element ${data.length - 1} holds a lone surrogate (\\ud800), which UTF-8 cannot carry`,
      });
      continue;
    }
    assert.equal(answer.status, 200, answer.text.slice(0, 200));
    const out = (JSON.parse(answer.text) as { outputs: { data: string[] }[] }).outputs[0]!.data;
    assert.deepEqual(out, data);
  }
});

test("a large body refused is refused in the same words as a small one", async () => {
  const large = OFF_THREAD_JSON_BYTES;
  const cases = [
    // Malformed JSON: rapidjson's words and the byte offset of the fault.
    `{"parameters":{${padding(large)}},}`,
    // Not an object.
    `[${"1,".repeat(large / 2)}1]`,
    // A sequence_id written as a fraction, past the first MiB.
    `{"parameters":{${padding(large)},"sequence_id":1.0},"inputs":[]}`,
    // An element that is no number.
    `{"parameters":{${padding(large)}},"inputs":[{"name":"INPUT0","datatype":"FP32","shape":[2],"data":[1,"two"]}]}`,
    // Strings for a number input.
    `{"parameters":{${padding(large)}},"inputs":[{"name":"INPUT0","datatype":"FP32","shape":[300],"data":[${'"x",'.repeat(299)}"x"]}]}`,
    // Too many elements for the shape.
    `{"inputs":[{"name":"INPUT0","datatype":"FP32","shape":[2],"data":[${"0.5,".repeat(large / 4)}1]}]}`,
  ];
  const refusals = [
    (() => {
      try {
        parseRequestJson(cases[0]!);
      } catch (error) {
        return (error as Error).message;
      }
      return "parsed";
    })(),
    "failed to parse the request JSON buffer: expected an object, got an array",
    "Unable to parse 'sequence_id': attempt to access JSON non-string as string",
    `unable to parse 'data' for input 'INPUT0': element 1 is "two", but FP32 expects a number`,
    `unable to parse 'data' for input 'INPUT0': element 0 is "x", but FP32 expects a number`,
    `unable to parse 'data' for input 'INPUT0': shape [2] has 2 elements, but 'data' holds ${large / 4 + 1}`,
  ];
  for (const [i, body] of cases.entries()) {
    assert.ok(body.length >= large, `case ${i}: ${body.length} bytes`);
    const answer = await post("fp32", body);
    assert.equal(answer.status, 400, `case ${i}: ${answer.text.slice(0, 200)}`);
    assert.deepEqual(JSON.parse(answer.text), { error: refusals[i] }, `case ${i}`);
  }
  // And the server goes on answering.
  const ok = await post("fp32", `{"inputs":[{"name":"INPUT0","datatype":"FP32","shape":[1],"data":[2.5]}]}`);
  assert.equal(ok.status, 200);
});
