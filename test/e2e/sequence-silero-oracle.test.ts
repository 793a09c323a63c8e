import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { Agent, request } from "node:http";
import { after, before, describe, it } from "node:test";
import ort from "onnxruntime-node";
import { batchCounts, listSequences } from "../support/sequence-kit.ts";
import { startTestServer, type TestServer } from "../support/test-server.ts";

// The oracle: 256 Silero VAD v5 streams of 50 chunks each, served statefully (the
// example silero_vad_stateful config: Oldest strategy, batches of up to 64 streams, the
// [2, batch, 128] state kept on the server through state_pairs, `sr` shared by the batch),
// their chunks interleaved at random by 64 concurrent HTTP clients. Every answer must be
// bit-identical to ONNX Runtime run in this process on that stream's chunks alone (batch 1,
// stateN fed back as state): batching, gathering and scattering state along axis 1, and
// the order of each stream's chunks must change nothing.

const SILERO = new URL("../../node_modules/@ricky0123/vad-web/dist/silero_vad_v5.onnx", import.meta.url);
const CONFIG = readFileSync(
  new URL("../../examples/models/silero_vad_stateful/config.pbtxt", import.meta.url),
  "utf8",
);
const MODEL = "silero_vad_stateful";

const STREAMS = 256;
const CHUNKS = 50;
const CLIENTS = 64;
const CHUNK = 512;
const SAMPLE_RATE = 16000n;
/** Stream ids far from small numbers (and above 2^53): they must reach the right state. */
const FIRST_ID = 2n ** 60n;

/** mulberry32: a small seeded generator, so every run sends the same audio in its own order. */
function random(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** Audio-like chunks: voiced bursts (a few harmonics under an envelope) between stretches of noise. */
function streamAudio(stream: number): Float32Array[] {
  const rng = random(1000 + stream);
  const pitch = 90 + rng() * 200;
  const loudness = 0.05 + rng() * 0.5;
  const noise = 0.002 + rng() * 0.02;
  const chunks: Float32Array[] = [];
  let voiced = rng() < 0.5;
  let phase = 0;
  for (let c = 0; c < CHUNKS; c++) {
    if (rng() < 0.15) voiced = !voiced;
    const chunk = new Float32Array(CHUNK);
    for (let i = 0; i < CHUNK; i++) {
      phase += (2 * Math.PI * pitch) / Number(SAMPLE_RATE);
      const envelope = voiced ? loudness * (0.6 + 0.4 * Math.sin(phase / 37)) : 0;
      const tone = Math.sin(phase) + 0.5 * Math.sin(2 * phase) + 0.25 * Math.sin(3 * phase);
      chunk[i] = envelope * tone + noise * (rng() * 2 - 1);
    }
    chunks.push(chunk);
  }
  return chunks;
}

const bitsOf = (value: number): number => new Uint32Array(Float32Array.of(value).buffer)[0]!;

/** Each stream alone, in this process, at batch 1, with the server's session options. */
async function oracle(audio: readonly Float32Array[][]): Promise<number[][]> {
  const session = await ort.InferenceSession.create(new URL(SILERO).pathname, {
    intraOpNumThreads: 1,
    executionMode: "sequential",
    graphOptimizationLevel: "all",
  });
  try {
    const sr = new ort.Tensor("int64", BigInt64Array.of(SAMPLE_RATE), []);
    const outputs: number[][] = [];
    for (const chunks of audio) {
      let state = new ort.Tensor("float32", new Float32Array(2 * 128), [2, 1, 128]);
      const bits: number[] = [];
      for (const chunk of chunks) {
        const result = await session.run({ input: new ort.Tensor("float32", chunk, [1, CHUNK]), state, sr });
        bits.push(bitsOf((result.output!.data as Float32Array)[0]!));
        state = result.stateN as typeof state;
      }
      outputs.push(bits);
    }
    return outputs;
  } finally {
    await session.release();
  }
}

/**
 * One chunk through the binary tensor extension on a keep-alive node:http agent (lighter
 * than fetch: the test process also runs the server). Resolves with the raw FP32 output.
 */
function sendChunk(
  agent: Agent,
  url: URL,
  id: bigint,
  chunk: Float32Array,
  flags: { start: boolean; end: boolean },
): Promise<{ status: number; output?: Buffer; error?: string }> {
  const parameters = [`"sequence_id":${id}`, '"binary_data_output":true'];
  if (flags.start) parameters.push('"sequence_start":true');
  if (flags.end) parameters.push('"sequence_end":true');
  const header = Buffer.from(
    `{"parameters":{${parameters.join(",")}},"inputs":[` +
      `{"name":"input","datatype":"FP32","shape":[1,${CHUNK}],"parameters":{"binary_data_size":${chunk.byteLength}}},` +
      `{"name":"sr","datatype":"INT64","shape":[],"parameters":{"binary_data_size":8}}]}`,
  );
  const body = Buffer.concat([
    header,
    Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength),
    SR_BYTES,
  ]);
  return new Promise((resolve, reject) => {
    const req = request(
      url,
      {
        method: "POST",
        agent,
        headers: {
          "content-type": "application/octet-stream",
          "content-length": body.byteLength,
          "inference-header-content-length": header.byteLength,
        },
      },
      (res) => {
        const parts: Buffer[] = [];
        res.on("data", (part: Buffer) => parts.push(part));
        res.on("error", reject);
        res.on("end", () => {
          const raw = Buffer.concat(parts);
          if (res.statusCode !== 200) {
            resolve({ status: res.statusCode ?? 0, error: raw.toString() });
            return;
          }
          const length = Number(res.headers["inference-header-content-length"]);
          const json = JSON.parse(raw.subarray(0, length).toString()) as {
            outputs: { name: string; parameters?: { binary_data_size?: number } }[];
          };
          let offset = length;
          for (const output of json.outputs) {
            const size = output.parameters?.binary_data_size ?? 0;
            if (output.name === "output") {
              resolve({ status: 200, output: raw.subarray(offset, offset + size) });
              return;
            }
            offset += size;
          }
          resolve({ status: 200, error: `no output in ${raw.subarray(0, length).toString()}` });
        });
      },
    );
    req.on("error", reject);
    req.end(body);
  });
}

const SR_BYTES = Buffer.from(BigInt64Array.of(SAMPLE_RATE).buffer);

let server: TestServer;
before(async () => {
  server = await startTestServer({ [MODEL]: { config: CONFIG, onnx: readFileSync(SILERO) } });
});
after(() => server.stop());

describe("Silero VAD oracle", { timeout: 300_000 }, () => {
  it("256 interleaved streams over 64 clients answer bit for bit as each stream run alone", async () => {
    const audio = Array.from({ length: STREAMS }, (_, s) => streamAudio(s));
    const expected = await oracle(audio);
    // The audio makes the detector say different things: not all answers are alike.
    assert.ok(new Set(expected.flat()).size > STREAMS);

    const served: number[][] = Array.from({ length: STREAMS }, () => []);
    const next = new Array<number>(STREAMS).fill(0);
    const idle = Array.from({ length: STREAMS }, (_, s) => s);
    const failures: string[] = [];
    const agent = new Agent({ keepAlive: true, maxSockets: CLIENTS });
    const url = new URL(`${server.url}/v2/models/${MODEL}/infer`);
    const client = async (seed: number) => {
      const rng = random(seed);
      // Take a random stream that has chunks left and no chunk in flight; give it back after.
      while (idle.length > 0) {
        const pick = Math.floor(rng() * idle.length);
        const stream = idle[pick]!;
        idle[pick] = idle[idle.length - 1]!;
        idle.pop();
        const chunk = next[stream]!;
        const answer = await sendChunk(agent, url, FIRST_ID + BigInt(stream), audio[stream]![chunk]!, {
          start: chunk === 0,
          end: chunk === CHUNKS - 1,
        });
        const output = answer.output;
        if (answer.status !== 200 || output === undefined) {
          failures.push(`stream ${stream} chunk ${chunk}: ${answer.status} ${answer.error}`);
          continue;
        }
        assert.equal(output.byteLength, 4);
        served[stream]!.push(output.readUInt32LE(0));
        next[stream] = chunk + 1;
        if (chunk + 1 < CHUNKS) idle.push(stream);
      }
    };
    await Promise.all(Array.from({ length: CLIENTS }, (_, c) => client(c + 1))).finally(() =>
      agent.destroy(),
    );

    assert.deepEqual(failures, []);
    for (let s = 0; s < STREAMS; s++) {
      const mismatch = served[s]!.findIndex((bits, c) => bits !== expected[s]![c]);
      assert.equal(served[s]!.length, CHUNKS, `stream ${s} answered ${served[s]!.length} chunks`);
      assert.equal(
        mismatch,
        -1,
        `stream ${s}, chunk ${mismatch}: served 0x${served[s]![mismatch]?.toString(16)}, expected 0x${expected[s]![mismatch]?.toString(16)}`,
      );
    }

    // Batching happened: chunks of different streams shared executions.
    const counts = await batchCounts(server.url, MODEL);
    const sizes = Object.keys(counts).map(Number);
    assert.ok(
      sizes.some((size) => size > 1),
      `no batches: ${JSON.stringify(counts)}`,
    );
    const rows = Object.entries(counts).reduce((n, [size, count]) => n + Number(size) * count, 0);
    assert.equal(rows, STREAMS * CHUNKS);
    const { summary } = await listSequences(server.url, MODEL);
    assert.deepEqual(
      [summary.live, summary.backlog, summary.state_bytes, summary.ended.end],
      [0, 0, 0, STREAMS],
    );
  });
});
