import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { after, before, test } from "node:test";
import { status } from "@grpc/grpc-js";
import { seeded } from "../../src/bench/seeded-random.ts";
import type { ModelInferRequestMessage } from "../../src/frontends/grpc/messages.ts";
import { TestClient } from "../grpc/support/grpc-harness.ts";
import { rawBytes, rawOutput, StreamCall, sequenceParameters } from "../support/grpc-stream-call.ts";
import { getJson } from "../support/http-client.ts";
import {
  expectedBits,
  SILERO_PATH,
  SILERO_SAMPLE_RATE,
  SILERO_SAMPLES,
  SILERO_STATEFUL_CONFIG,
  SILERO_STATEFUL_MODEL,
  sequenceAudio,
} from "../support/silero-oracle.ts";
import { startTestServer, type TestServer } from "../support/test-server.ts";

// The oracle over gRPC: 256 Silero VAD v5 sequences of 50 chunks each, served statefully
// (the example silero_vad_stateful config: Oldest, batches of up to 64, the [2, batch, 128]
// state kept by the server, `sr` shared by the batch), carried by 16 ModelStreamInfer
// streams of 16 sequences each. Each stream interleaves its sequences' chunks in a random
// order (fixed seed), each sequence's chunks in order and at most one in flight. Every
// `output` must be bit-identical to ONNX Runtime run in this process on that sequence
// alone (batch 1, stateN fed back as state).

const MODEL = SILERO_STATEFUL_MODEL;

const STREAMS = 16;
const SEQUENCES_PER_STREAM = 16;
const SEQUENCES = STREAMS * SEQUENCES_PER_STREAM;
const CHUNKS = 50;
/** Streams share connections: 4 channels, 4 streams each. */
const CHANNELS = 4;
/** Ids above 2^63 travel as negative int64_param bit patterns: they must still find their state. */
const FIRST_ID = (1n << 63n) + 12345n;

let server: TestServer;
const clients: TestClient[] = [];
before(async () => {
  server = await startTestServer(
    { [MODEL]: { config: SILERO_STATEFUL_CONFIG, onnx: readFileSync(SILERO_PATH) } },
    { exitTimeoutSecs: 1 },
  );
  for (let c = 0; c < CHANNELS; c++) clients.push(new TestClient(server.grpcPort));
});
after(async () => {
  for (const client of clients) client.close();
  await server.stop();
});

const SR_BYTES = rawBytes(BigInt64Array.of(SILERO_SAMPLE_RATE));

function chunkRequest(sequence: number, chunk: number, audio: Float32Array): ModelInferRequestMessage {
  return {
    model_name: MODEL,
    parameters: sequenceParameters({
      id: FIRST_ID + BigInt(sequence),
      start: chunk === 0,
      end: chunk === CHUNKS - 1,
    }),
    inputs: [
      { name: "input", datatype: "FP32", shape: [1, SILERO_SAMPLES] },
      { name: "sr", datatype: "INT64", shape: [] },
    ],
    raw_input_contents: [rawBytes(audio), SR_BYTES],
  };
}

/**
 * Drives one stream's sequences: whenever answers free some sequences, their next chunks
 * go out together in a seeded random order; a sequence's next chunk is sent only after the
 * answer to its previous one. Resolves with the output bits per sequence.
 */
function driveStream(
  call: StreamCall,
  sequences: readonly number[],
  audio: readonly Float32Array[][],
  seed: number,
): Promise<Map<number, Uint32Array>> {
  const random = seeded(seed);
  const served = new Map(sequences.map((s) => [s, new Uint32Array(CHUNKS)]));
  const next = new Map(sequences.map((s) => [s, 0]));
  let ready = [...sequences];
  let unfinished = sequences.length;
  let flushing = false;
  return new Promise((resolve, reject) => {
    const send = (sequence: number): void => {
      const chunk = next.get(sequence)!;
      next.set(sequence, chunk + 1);
      call.send(chunkRequest(sequence, chunk, audio[sequence]![chunk]!)).then((response) => {
        const output = rawOutput(response, "output");
        assert.equal(output.byteLength, 4);
        served.get(sequence)![chunk] = output.readUInt32LE(0);
        if (chunk + 1 < CHUNKS) {
          ready.push(sequence);
          if (!flushing) {
            flushing = true;
            setImmediate(flush);
          }
        } else if (--unfinished === 0) {
          resolve(served);
        }
      }, reject);
    };
    const flush = (): void => {
      flushing = false;
      const batch = ready;
      ready = [];
      for (let i = batch.length - 1; i > 0; i--) {
        const j = Math.floor(random() * (i + 1));
        [batch[i], batch[j]] = [batch[j]!, batch[i]!];
      }
      for (const sequence of batch) send(sequence);
    };
    flush();
  });
}

test("256 Silero VAD sequences over 16 streams answer bit for bit as each sequence run alone", {
  timeout: 300_000,
}, async () => {
  const audio = Array.from({ length: SEQUENCES }, (_, s) => sequenceAudio(s, CHUNKS));
  const expected = await expectedBits(audio);
  // The audio makes the detector say many different things.
  assert.ok(new Set(expected.flatMap((bits) => [...bits])).size > SEQUENCES);

  const calls = Array.from({ length: STREAMS }, (_, k) => new StreamCall(clients[k % CHANNELS]!, `s${k}-`));
  const results = await Promise.all(
    calls.map((call, k) =>
      driveStream(
        call,
        Array.from({ length: SEQUENCES_PER_STREAM }, (_, i) => k * SEQUENCES_PER_STREAM + i),
        audio,
        k + 1,
      ),
    ),
  );
  for (const call of calls) assert.equal((await call.end()).code, status.OK);

  for (const served of results) {
    for (const [sequence, bits] of served) {
      const want = expected[sequence]!;
      const mismatch = bits.findIndex((b, c) => b !== want[c]);
      assert.equal(
        mismatch,
        -1,
        `sequence ${sequence}, chunk ${mismatch}: served 0x${bits[mismatch]?.toString(16)}, expected 0x${want[mismatch]?.toString(16)}`,
      );
    }
  }

  // Batching happened: chunks of different sequences shared executions.
  type Stats = {
    model_stats: Array<{
      inference_count?: string;
      execution_count?: string;
      batch_stats: Array<{ batch_size: string; compute_infer: { count?: string } }>;
    }>;
  };
  const [stats] = (await clients[0]!.unary<Stats>("ModelStatistics", { name: MODEL })).model_stats;
  assert.equal(Number(stats?.inference_count), SEQUENCES * CHUNKS);
  const batches = (stats?.batch_stats ?? []).map((b) => [
    Number(b.batch_size),
    Number(b.compute_infer.count ?? 0),
  ]);
  assert.ok(
    batches.some(([size, count]) => size! > 1 && count! > 0),
    `no batch of more than one: ${JSON.stringify(batches)}`,
  );
  assert.equal(
    batches.reduce((rows, [size, count]) => rows + size! * count!, 0),
    SEQUENCES * CHUNKS,
  );
  assert.ok(Number(stats?.execution_count) < SEQUENCES * CHUNKS);
  // Every sequence ended at its last chunk and left nothing behind.
  const listed = (await getJson(`${server.url}/v2/models/${MODEL}/sequences`)).body as {
    summary: { live: number; backlog: number; state_bytes: number; ended: Record<string, number> };
  };
  const { summary } = listed;
  assert.deepEqual(
    [summary.live, summary.backlog, summary.state_bytes, summary.ended.end],
    [0, 0, 0, SEQUENCES],
  );
});
