import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { after, before, test } from "node:test";
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
  SILERO_SAMPLES,
  SILERO_STATEFUL_CONFIG,
  SILERO_STATEFUL_MODEL,
  sequenceAudio,
} from "../support/silero-oracle.ts";
import { startTestServer, type TestServer } from "../support/test-server.ts";
import { framed, StreamClient } from "./support/ws-client.ts";

// WebSocket messages whose JSON is a MiB or more are parsed, and JSON answers of 65,536
// elements or more written, on the JSON thread, as HTTP bodies are. A stream still
// answers in the order its messages came, text and framed alike, and a sequence of large
// messages answers as the oracle does.

let server: TestServer;
let port: { port: number };
before(async () => {
  server = await startTestServer({
    fp32: { config: "max_batch_size: 0", onnx: identityModel("FP32", [-1]) },
    [SILERO_STATEFUL_MODEL]: { config: SILERO_STATEFUL_CONFIG, onnx: readFileSync(SILERO_PATH) },
  });
  port = { port: Number(new URL(server.url).port) };
});
after(() => server.stop());

/** `count` floats, -0 among them (float-rows.ts). */
const values = (count: number): number[] => floatRows(1, count)[0]!;

const request = (data: readonly number[], extra = "") =>
  `{${extra}"inputs":[{"name":"INPUT0","datatype":"FP32","shape":[${data.length}],"data":${rowsText([data]).slice(1, -1)}}]}`;

type Answer = Record<string, unknown>;

/** The answer's one output is `sent` as FP32, exactly. */
const assertExact = (answer: Answer, sent: readonly number[], what: string) =>
  assertRowsExact([(answer.outputs as { data: number[] }[])[0]!.data], asFp32([sent]), what);

test("large and small messages on one stream are answered exactly, in the order they came", async () => {
  const large = values(OFF_THREAD_JSON_ELEMENTS * 2);
  const small = values(3);
  const padding = `"parameters":{"padding":"${"x".repeat(OFF_THREAD_JSON_BYTES)}"},`;
  const framedLarge = framed(
    {
      parameters: { padding: "x".repeat(OFF_THREAD_JSON_BYTES) },
      inputs: [{ name: "INPUT0", datatype: "FP32", shape: [3], parameters: { binary_data_size: 12 } }],
      outputs: [{ name: "OUTPUT0", parameters: { binary_data: false } }],
    },
    [Float32Array.of(1.5, -2, 0.25)],
  );
  const client = await StreamClient.open(port, "/v2/models/fp32/stream");
  const before = jsonThreadBodies();
  client.send(request(large, '"id":"large",'));
  client.send(request(small, '"id":"small",'));
  client.send(framedLarge);
  client.send(request(small, `"id":"padded",${padding}`));
  const answers = [await client.next(), await client.next(), await client.next(), await client.next()];
  // Answers with no binary output are text frames, whichever thread wrote them.
  assert.deepEqual(
    answers.map((a) => a.binary),
    [false, false, false, false],
  );
  const json = answers.map((a) => JSON.parse(a.data.toString("utf8")) as Record<string, unknown>);
  assert.deepEqual(
    json.map((j) => j.id ?? "framed"),
    ["large", "small", "framed", "padded"],
  );
  const [first, second, third, fourth] = json as [Answer, Answer, Answer, Answer];
  assertExact(first, large, "large");
  assertExact(second, small, "small");
  assert.deepEqual((third.outputs as { data: number[] }[])[0]!.data, [1.5, -2, 0.25]);
  assertExact(fourth, small, "padded");
  // Parsed: the large text, the framed header and the padded one; written: the large answer.
  assert.equal(jsonThreadBodies() - before, 4);
  await client.close();
});

test("a raw stream's large text message is JSON, parsed on the JSON thread too", async () => {
  const large = values(OFF_THREAD_JSON_ELEMENTS * 2);
  const client = await StreamClient.open(port, "/v2/models/fp32/stream?format=raw");
  const before = jsonThreadBodies();
  client.send(request(large));
  client.send(Buffer.from(Float32Array.of(0.5, -1).buffer));
  assertExact(await client.nextText(), large, "large");
  // The raw input's answer: its outputs framed, raw.
  const { binary } = await client.nextFramed();
  assert.deepEqual([binary.readFloatLE(0), binary.readFloatLE(4)], [0.5, -1]);
  assert.equal(jsonThreadBodies() - before, 2, "parsed and written on the JSON thread");
  await client.close();
});

test("a large message refused is answered in the same words as a small one, and the stream goes on", async () => {
  const padding = `"parameters":{"padding":"${"x".repeat(OFF_THREAD_JSON_BYTES)}"},`;
  const client = await StreamClient.open(port, "/v2/models/fp32/stream");
  const bad = `"inputs":[{"name":"INPUT0","datatype":"FP32","shape":[2],"data":[1,"two"]}]}`;
  client.send(`{${bad}`);
  client.send(`{${padding}${bad}`);
  client.send(`{${padding}"inputs":[}`);
  client.send(`{"inputs":[}`);
  client.send(request([0.5]));
  const [small, large, malformedLarge, malformedSmall, ok] = [
    await client.nextText(),
    await client.nextText(),
    await client.nextText(),
    await client.nextText(),
    await client.nextText(),
  ];
  assert.deepEqual(large, small);
  assert.match(String(small.error), /element 1 is "two"/);
  // Past 64 KiB the parse fault's offset is not searched for: the words are the same.
  assert.equal(String(malformedLarge.error), String(malformedSmall.error).replace(/ at \d+$/, ""));
  assertExact(ok, [0.5], "the next message");
  await client.close();
});

test("a Silero VAD sequence of large messages answers bit for bit", { timeout: 60_000 }, async () => {
  const audio = sequenceAudio(41, 8);
  const [expected] = await expectedBits([audio]);
  const padding = "x".repeat(OFF_THREAD_JSON_BYTES);
  const client = await StreamClient.open(port, `/v2/models/${SILERO_STATEFUL_MODEL}/stream`);
  const before = jsonThreadBodies();
  for (const [c, chunk] of audio.entries()) {
    const end = c === audio.length - 1;
    client.send({
      parameters: { padding, ...(end ? { sequence_end: true } : {}) },
      inputs: [
        { name: "input", datatype: "FP32", shape: [1, SILERO_SAMPLES], data: [...chunk] },
        { name: "sr", datatype: "INT64", shape: [], data: [16000] },
      ],
    });
  }
  const bits: number[] = [];
  for (let c = 0; c < audio.length; c++) {
    const answer = await client.nextText();
    const output = (answer.outputs as { name: string; data: number[] }[]).find((o) => o.name === "output");
    assert.ok(output !== undefined, JSON.stringify(answer).slice(0, 300));
    bits.push(fp32Bits(output.data[0]!));
  }
  assert.equal(firstMismatch(0, bits, expected!), undefined);
  assert.equal(jsonThreadBodies() - before, audio.length, "each message parsed on the JSON thread");
  assert.equal((await client.closed).code, 1000);
});
