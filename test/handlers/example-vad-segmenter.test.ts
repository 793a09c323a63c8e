import assert from "node:assert/strict";
import { request as httpRequest } from "node:http";
import { after, before, test } from "node:test";
import { fileURLToPath } from "node:url";
import WebSocket from "ws";
import type { SpeechEvent } from "../../examples/models/vad_segmenter/1/segmenter.ts";
import { pieces, segmenterStreams } from "../support/segmenter-oracle.ts";
import { SILERO_SAMPLES } from "../support/silero-oracle.ts";
import { startTestServer, type TestServer } from "../support/test-server.ts";
import { eventually, sequencesOf } from "./support/handler-kit.ts";

// The vad_segmenter example end to end: audio streams in, speech_start / speech_end
// events come out as they happen, over a WebSocket stream and Server-Sent Events. The
// expected events are the example's own segmenter run on Silero VAD's probabilities from
// ONNX Runtime in this process, each stream alone at batch 1: the served events, scored
// by silero_vad_stateful in batches across streams, must be exactly these.

const CHUNKS = 96;
/** Not a multiple of 512: the handler carries the rest over to the next request. */
const PIECE = 700;

let server: TestServer;
let audio: Float32Array[];
let expected: SpeechEvent[][];

before(async () => {
  server = await startTestServer(fileURLToPath(new URL("../../examples/models", import.meta.url)));
  ({ audio, expected } = await segmenterStreams([40, 41, 42], CHUNKS));
});

after(() => server.stop());

interface EventJson {
  readonly outputs?: { name: string; data: unknown[] }[];
  readonly [key: string]: unknown;
}

function eventFrom(outputs: { name: string; data: unknown[] }[]): SpeechEvent & { time: number } {
  const value = (name: string) => outputs.find((o) => o.name === name)!.data[0];
  return {
    event: value("EVENT") as SpeechEvent["event"],
    sample: Number(value("SAMPLE")),
    time: value("TIME") as number,
  };
}

test("the expected streams have speech starts and ends to find", () => {
  for (const events of expected) {
    assert.ok(events.some((e) => e.event === "speech_start"));
    assert.ok(events.some((e) => e.event === "speech_end"));
  }
});

async function overWebSocket(stream: number): Promise<(SpeechEvent & { time: number })[]> {
  const socket = new WebSocket(`${server.url.replace("http", "ws")}/v2/models/vad_segmenter/stream`);
  await new Promise((resolve, reject) => socket.once("open", resolve).once("error", reject));
  const events: (SpeechEvent & { time: number })[] = [];
  const closed = new Promise<number>((resolve) => socket.on("close", (code: number) => resolve(code)));
  socket.on("message", (data: Buffer) => {
    const message = JSON.parse(data.toString()) as EventJson;
    if (message.error !== undefined) throw new Error(String(message.error));
    if ((message.outputs ?? []).length > 0) events.push(eventFrom(message.outputs!));
  });
  const parts = pieces(audio[stream]!, PIECE);
  parts.forEach((part, i) => {
    socket.send(
      JSON.stringify({
        ...(i === parts.length - 1 ? { parameters: { sequence_end: true } } : {}),
        inputs: [{ name: "AUDIO", datatype: "FP32", shape: [1, part.length], data: [...part] }],
      }),
    );
  });
  assert.equal(await closed, 1000);
  return events;
}

function postEvents(body: unknown): Promise<string> {
  return new Promise((resolve, reject) => {
    const call = httpRequest(
      `${server.url}/v2/models/vad_segmenter/generate_stream`,
      { method: "POST", headers: { "content-type": "application/json" } },
      (response) => {
        let text = "";
        response.setEncoding("utf8");
        response.on("data", (chunk: string) => {
          text += chunk;
        });
        response.on("end", () => (response.statusCode === 200 ? resolve(text) : reject(new Error(text))));
      },
    );
    call.on("error", reject);
    call.end(JSON.stringify(body));
  });
}

async function overEventStreams(stream: number, id: number): Promise<(SpeechEvent & { time: number })[]> {
  const events: (SpeechEvent & { time: number })[] = [];
  const parts = pieces(audio[stream]!, PIECE);
  for (let i = 0; i < parts.length; i++) {
    const text = await postEvents({
      AUDIO: [...parts[i]!],
      sequence_id: id,
      sequence_start: i === 0,
      sequence_end: i === parts.length - 1,
    });
    for (const chunk of text.split("\n\n")) {
      if (!chunk.startsWith("data: ")) continue;
      const json = JSON.parse(chunk.slice(6)) as Record<string, unknown>;
      if (json.error !== undefined) throw new Error(String(json.error));
      events.push({
        event: json.EVENT as SpeechEvent["event"],
        sample: json.SAMPLE as number,
        time: json.TIME as number,
      });
    }
  }
  return events;
}

test("events over WebSocket streams and Server-Sent Events match the in-process oracle", async () => {
  const [first, second, third] = await Promise.all([
    overWebSocket(0),
    overWebSocket(1),
    overEventStreams(2, 4242),
  ]);
  for (const [stream, events] of [first!, second!, third!].entries()) {
    assert.deepEqual(
      events.map(({ event, sample }) => ({ event, sample })),
      expected[stream],
    );
    for (const event of events) assert.equal(event.time, event.sample / 16000);
  }
  // Every stream ended: the segmenter's sequences and the VAD sequences it opened are gone.
  for (const model of ["vad_segmenter", "silero_vad_stateful"]) {
    const listing = await sequencesOf(server.url, model);
    assert.deepEqual(listing.sequences, [], model);
    assert.equal(listing.summary.state_bytes, 0, model);
  }
});

test("a stream whose client leaves during its first request ends the VAD sequence that request started", async () => {
  // Silence long enough to be scored for a while, chunk by chunk, after the VAD sequence starts.
  const silence = new Array(SILERO_SAMPLES * 1200).fill(0);
  const call = httpRequest(`${server.url}/v2/models/vad_segmenter/generate_stream`, {
    method: "POST",
    headers: { "content-type": "application/json" },
  });
  call.on("error", () => {});
  call.end(JSON.stringify({ AUDIO: silence, sequence_id: 4343, sequence_start: true }));
  await eventually(
    "the VAD sequence to start",
    async () => (await sequencesOf(server.url, "silero_vad_stateful")).summary.live > 0 || undefined,
  );
  call.destroy();
  // The stream's only request was cancelled: its state went back to empty, with no VAD
  // sequence in it for sequenceEnded to end.
  await eventually(
    "the stream to end, cancelled",
    async () => (await sequencesOf(server.url, "vad_segmenter")).summary.ended.cancelled === 1 || undefined,
  );
  const listing = await eventually("the VAD sequence to end", async () => {
    const seen = await sequencesOf(server.url, "silero_vad_stateful");
    return seen.sequences.length === 0 ? seen : undefined;
  });
  assert.equal(listing.summary.state_bytes, 0);
  assert.deepEqual((await sequencesOf(server.url, "vad_segmenter")).sequences, []);
});

test("a stream its client closes without a last request ends the VAD sequence it opened", async () => {
  // Closed with 1000 (reason "end", but no final request to end the VAD sequence in).
  const socket = new WebSocket(`${server.url.replace("http", "ws")}/v2/models/vad_segmenter/stream`);
  await new Promise((resolve, reject) => socket.once("open", resolve).once("error", reject));
  const part = audio[0]!.subarray(0, PIECE);
  socket.send(
    JSON.stringify({ inputs: [{ name: "AUDIO", datatype: "FP32", shape: [1, PIECE], data: [...part] }] }),
  );
  await eventually(
    "the VAD sequence to start",
    async () => (await sequencesOf(server.url, "silero_vad_stateful")).summary.live > 0 || undefined,
  );
  const before = (await sequencesOf(server.url, "vad_segmenter")).summary.ended.end ?? 0;
  socket.close(1000);
  await eventually(
    "the stream to end",
    async () =>
      ((await sequencesOf(server.url, "vad_segmenter")).summary.ended.end ?? 0) > before || undefined,
  );
  const listing = await eventually("the VAD sequence to end", async () => {
    const seen = await sequencesOf(server.url, "silero_vad_stateful");
    return seen.sequences.length === 0 ? seen : undefined;
  });
  assert.equal(listing.summary.state_bytes, 0);
});
