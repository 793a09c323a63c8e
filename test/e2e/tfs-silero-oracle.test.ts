import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { getJson } from "../support/http-client.ts";
import { expectedBits, firstMismatch, fp32Bits, sequenceAudio } from "../support/silero-oracle.ts";
import { type OvmsServer, SILERO_OVMS, startOvmsServer } from "../tfs/support/ovms-server.ts";
import { TfsClient } from "../tfs/support/tfs-client.ts";
import { type Endpoints, type StepOutcome, step, type Transport } from "../tfs/support/vad-steps.ts";

// The oracle over the TF-Serving API: Silero VAD v5 listed in an OVMS config.json
// (stateful, its state pair and shared `sr` found from the model), driven by concurrent
// clients as the OVMS guide's clients drive it — 16 sequences over gRPC Predict (four
// channels) and 8 over REST, all at once, each sequence's chunks in order. Some ids are
// the client's (beyond 2^63), some the server's. Every `output` must be bit-identical to
// ONNX Runtime run in this process on that sequence alone.

const GRPC_SEQUENCES = 16;
const REST_SEQUENCES = 8;
const SEQUENCES = GRPC_SEQUENCES + REST_SEQUENCES;
const CHUNKS = 40;
const CHANNELS = 4;
const FIRST_ID = (1n << 63n) + 777n;

let ovms: OvmsServer;
const clients: TfsClient[] = [];
before(async () => {
  ovms = await startOvmsServer({ vad: SILERO_OVMS });
  for (let c = 0; c < CHANNELS; c++) clients.push(new TfsClient(ovms.grpcPort));
});
after(async () => {
  for (const client of clients) client.close();
  await ovms.stop();
});

function bitsOf(outcome: StepOutcome, sequence: number, chunk: number): { id: bigint; bits: number } {
  if (!outcome.ok) assert.fail(`sequence ${sequence}, chunk ${chunk}: ${outcome.code} ${outcome.message}`);
  return { id: outcome.id, bits: fp32Bits(outcome.output) };
}

/** One client's sequence: START (its id, or none for every third), the chunks, END with the last. */
async function run(transport: Transport, endpoints: Endpoints, sequence: number, audio: Float32Array[]) {
  const chosen = sequence % 3 === 0 ? undefined : FIRST_ID + BigInt(sequence);
  const bits = new Uint32Array(audio.length);
  let id = chosen;
  for (let c = 0; c < audio.length; c++) {
    const control = c === 0 ? 1 : c === audio.length - 1 ? 2 : undefined;
    const outcome = await step(endpoints, transport, "vad", { id, control, audio: audio[c]! });
    const answer = bitsOf(outcome, sequence, c);
    if (chosen !== undefined) assert.equal(answer.id, chosen);
    id = answer.id;
    bits[c] = answer.bits;
  }
  return bits;
}

test("24 Silero VAD sequences from concurrent gRPC and REST clients answer bit for bit", {
  timeout: 300_000,
}, async () => {
  const audio = Array.from({ length: SEQUENCES }, (_, s) => sequenceAudio(s, CHUNKS));
  const expected = await expectedBits(audio);
  const served = await Promise.all(
    audio.map((chunks, s) => {
      const grpc = s < GRPC_SEQUENCES;
      const endpoints = { grpc: clients[s % CHANNELS]!, url: ovms.url };
      return run(grpc ? "grpc" : "rest", endpoints, s, chunks);
    }),
  );
  for (let s = 0; s < SEQUENCES; s++) {
    const mismatch = firstMismatch(s, served[s]!, expected[s]!);
    assert.equal(mismatch, undefined, mismatch);
  }
  // Chunks of different sequences shared executions, and nothing was left behind.
  const stats = (await getJson(`${ovms.url}/v2/models/vad/stats`)).body as {
    model_stats: { inference_count: number; execution_count: number }[];
  };
  const [vad] = stats.model_stats;
  assert.equal(vad?.inference_count, SEQUENCES * CHUNKS);
  assert.ok((vad?.execution_count ?? Infinity) < SEQUENCES * CHUNKS, `no batching: ${JSON.stringify(vad)}`);
  const { summary } = (await getJson(`${ovms.url}/v2/models/vad/sequences`)).body as {
    summary: { live: number; state_bytes: number; ended: Record<string, number> };
  };
  assert.deepEqual([summary.live, summary.state_bytes, summary.ended.end], [0, 0, SEQUENCES]);
});
