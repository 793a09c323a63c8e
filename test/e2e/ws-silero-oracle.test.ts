import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { after, before, describe, it } from "node:test";
import WebSocket from "ws";
import { seeded } from "../../src/bench/seeded-random.ts";
import { framed, unframe } from "../http/support/ws-client.ts";
import { batchCounts, findSequence, listSequences, waitFor } from "../support/sequence-kit.ts";
import {
  expectedBits,
  firstMismatch,
  SILERO_PATH,
  SILERO_SAMPLES,
  SILERO_SR_BYTES,
  SILERO_STATEFUL_CONFIG,
  SILERO_STATEFUL_MODEL,
  sequenceAudio,
} from "../support/silero-oracle.ts";
import { startTestServer, type TestServer } from "../support/test-server.ts";

// The oracle over WebSockets: 256 Silero VAD v5 sequences of 50 chunks each, one
// WebSocket per sequence (GET /v2/models/silero_vad_stateful/stream), all open at once.
// Each socket sends its chunks in seeded random bursts of 1-4 messages (the server keeps
// them in order), and ends its sequence with `sequence_end` on the last chunk. Half the
// sockets choose their id (above 2^53), half let the server assign one. Every `output`
// must be bit-identical to ONNX Runtime run in this process on that sequence alone.
// Then: a socket that drops or closes mid-sequence frees that sequence's state.

const MODEL = SILERO_STATEFUL_MODEL;
const SEQUENCES = 256;
const CHUNKS = 50;
const FIRST_ID = 2n ** 61n + 7n;

/** The framed header of one chunk: `input` then `sr`, both as raw bytes. */
function chunkHeader(end: boolean): unknown {
  return {
    ...(end ? { parameters: { sequence_end: true } } : {}),
    inputs: [
      {
        name: "input",
        datatype: "FP32",
        shape: [1, SILERO_SAMPLES],
        parameters: { binary_data_size: SILERO_SAMPLES * 4 },
      },
      { name: "sr", datatype: "INT64", shape: [], parameters: { binary_data_size: 8 } },
    ],
  };
}

/** The raw bytes of `output` in a framed answer, and the answer's header text. */
function outputOf(data: Buffer): { bits: number; text: string } {
  const answer = unframe(data);
  const outputs = answer.json.outputs as { name: string; parameters?: { binary_data_size?: number } }[];
  let offset = 0;
  for (const output of outputs) {
    const size = output.parameters?.binary_data_size ?? 0;
    if (output.name === "output") {
      assert.equal(size, 4);
      return { bits: answer.binary.readUInt32LE(offset), text: answer.text };
    }
    offset += size;
  }
  throw new Error(`no output in ${answer.text}`);
}

/** A socket whose messages are read in order; rejects on close before the expected answers. */
class Socket {
  readonly ws: WebSocket;
  readonly closed: Promise<number>;
  readonly #inbox: { data: Buffer; binary: boolean }[] = [];
  #wake: (() => void) | undefined;
  #closeCode: number | undefined;

  constructor(url: string) {
    this.ws = new WebSocket(url);
    this.ws.on("message", (data: Buffer, binary: boolean) => {
      this.#inbox.push({ data, binary });
      this.#wake?.();
    });
    this.closed = new Promise((resolve) =>
      this.ws.on("close", (code: number) => {
        this.#closeCode = code;
        this.#wake?.();
        resolve(code);
      }),
    );
    this.ws.on("error", () => {});
  }

  opened(): Promise<void> {
    return new Promise((resolve, reject) => {
      this.ws.once("open", () => resolve());
      this.ws.once("error", reject);
    });
  }

  async next(): Promise<Buffer> {
    for (;;) {
      const message = this.#inbox.shift();
      if (message !== undefined) {
        if (!message.binary) throw new Error(`an error answer: ${message.data.toString()}`);
        return message.data;
      }
      if (this.#closeCode !== undefined) throw new Error(`the stream closed with ${this.#closeCode}`);
      await new Promise<void>((resolve) => {
        this.#wake = resolve;
      });
      this.#wake = undefined;
    }
  }

  sendChunk(chunk: Float32Array, end: boolean): void {
    this.ws.send(framed(chunkHeader(end), [chunk, SILERO_SR_BYTES]));
  }
}

let server: TestServer;
let streamUrl: string;
before(async () => {
  server = await startTestServer({
    [MODEL]: { config: SILERO_STATEFUL_CONFIG, onnx: readFileSync(SILERO_PATH) },
  });
  streamUrl = `${server.url.replace("http:", "ws:")}/v2/models/${MODEL}/stream`;
});
after(() => server.stop());

/** Drives one sequence over its own socket; resolves with its output bits and what the first answer said. */
async function driveSequence(
  sequence: number,
  audio: readonly Float32Array[],
): Promise<{ bits: number[]; firstText: string; closeCode: number }> {
  const chosen = sequence % 2 === 0 ? FIRST_ID + BigInt(sequence) : undefined;
  const socket = new Socket(chosen === undefined ? streamUrl : `${streamUrl}?sequence_id=${chosen}`);
  await socket.opened();
  const random = seeded(0xab + sequence);
  const bits: number[] = [];
  let firstText = "";
  for (let sent = 0; sent < CHUNKS; ) {
    const burst = Math.min(1 + Math.floor(random() * 4), CHUNKS - sent);
    for (let i = 0; i < burst; i++) socket.sendChunk(audio[sent + i]!, sent + i === CHUNKS - 1);
    for (let i = 0; i < burst; i++) {
      const answer = outputOf(await socket.next());
      if (bits.length === 0) firstText = answer.text;
      bits.push(answer.bits);
    }
    sent += burst;
  }
  return { bits, firstText, closeCode: await socket.closed };
}

describe("Silero VAD oracle over WebSockets", { timeout: 300_000 }, () => {
  it("256 WebSockets, one sequence each, answer bit for bit as each sequence run alone", async () => {
    const audio = Array.from({ length: SEQUENCES }, (_, s) => sequenceAudio(s, CHUNKS));
    const expected = await expectedBits(audio);
    assert.ok(new Set(expected.flatMap((bits) => [...bits])).size > SEQUENCES);

    const results = await Promise.all(audio.map((chunks, s) => driveSequence(s, chunks)));

    const mismatches = results.map((r, s) => firstMismatch(s, r.bits, expected[s]!)).filter(Boolean);
    assert.deepEqual(mismatches, []);
    const assigned = new Set<string>();
    results.forEach((result, s) => {
      // The first answer names the sequence: the chosen id exactly, or the one the server assigned.
      const id = /"sequence_id":(\d+)/.exec(result.firstText)?.[1];
      assert.ok(id !== undefined, `sequence ${s}: no sequence_id in ${result.firstText}`);
      if (s % 2 === 0) assert.equal(id, String(FIRST_ID + BigInt(s)));
      else assigned.add(id);
      // The sequence ended with its last chunk; the server closed with 1000.
      assert.equal(result.closeCode, 1000, `sequence ${s} closed with ${result.closeCode}`);
    });
    assert.equal(assigned.size, SEQUENCES / 2, "assigned ids are distinct");

    // Chunks of different sequences shared executions, and every chunk ran once.
    const counts = await batchCounts(server.url, MODEL);
    assert.ok(
      Object.keys(counts).some((size) => Number(size) > 1),
      `no batches: ${JSON.stringify(counts)}`,
    );
    const rows = Object.entries(counts).reduce((n, [size, count]) => n + Number(size) * count, 0);
    assert.equal(rows, SEQUENCES * CHUNKS);
    const { summary } = await listSequences(server.url, MODEL);
    assert.deepEqual(
      [summary.live, summary.backlog, summary.state_bytes, summary.ended.end],
      [0, 0, 0, SEQUENCES],
    );
  });

  for (const [how, reason] of [
    ["drops the connection", "cancelled"],
    ["closes with 1000 without an end", "end"],
  ] as const) {
    it(`a socket that ${how} mid-sequence ends it (reason ${reason}) and frees its state`, async () => {
      const id = 424242n;
      const before = (await listSequences(server.url, MODEL)).summary.ended[reason] ?? 0;
      const socket = new Socket(`${streamUrl}?sequence_id=${id}`);
      await socket.opened();
      const audio = sequenceAudio(7, 3);
      for (const chunk of audio) socket.sendChunk(chunk, false);
      const bits = [];
      for (let i = 0; i < audio.length; i++) bits.push(outputOf(await socket.next()).bits);
      assert.equal(firstMismatch(7, bits, (await expectedBits([audio]))[0]!), undefined);
      // The state lives on the server: [2, 1, 128] FP32.
      const live = await findSequence(server.url, MODEL, id);
      assert.equal(live?.stateBytes, 2 * 128 * 4);
      assert.equal(live?.steps, 3);

      if (reason === "cancelled") socket.ws.terminate();
      else socket.ws.close(1000);
      const summary = await waitFor("the sequence to end", async () => {
        const listing = await listSequences(server.url, MODEL);
        return listing.sequences.length === 0 ? listing.summary : undefined;
      });
      assert.equal(summary.state_bytes, 0);
      assert.equal(summary.ended[reason], before + 1);
    });
  }
});
