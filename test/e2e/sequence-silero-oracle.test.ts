import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { Agent, request } from "node:http";
import { after, before, describe, it } from "node:test";
import { seeded } from "../../src/bench/seeded-random.ts";
import { batchCounts, listSequences } from "../support/sequence-kit.ts";
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

// The oracle: 256 Silero VAD v5 streams of 50 chunks each, served statefully (the
// example silero_vad_stateful config: Oldest strategy, batches of up to 64 streams, the
// [2, batch, 128] state kept on the server through state_pairs, `sr` shared by the batch),
// their chunks interleaved at random by 64 concurrent HTTP clients. Every answer must be
// bit-identical to ONNX Runtime run in this process on that stream's chunks alone (batch 1,
// stateN fed back as state): batching, gathering and scattering state along axis 1, and
// the order of each stream's chunks must change nothing.

const MODEL = SILERO_STATEFUL_MODEL;

const STREAMS = 256;
const CHUNKS = 50;
const CLIENTS = 64;
/** Stream ids far from small numbers (and above 2^53): they must reach the right state. */
const FIRST_ID = 2n ** 60n;

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
      `{"name":"input","datatype":"FP32","shape":[1,${SILERO_SAMPLES}],"parameters":{"binary_data_size":${chunk.byteLength}}},` +
      `{"name":"sr","datatype":"INT64","shape":[],"parameters":{"binary_data_size":8}}]}`,
  );
  const body = Buffer.concat([
    header,
    Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength),
    SILERO_SR_BYTES,
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

let server: TestServer;
before(async () => {
  server = await startTestServer({
    [MODEL]: { config: SILERO_STATEFUL_CONFIG, onnx: readFileSync(SILERO_PATH) },
  });
});
after(() => server.stop());

describe("Silero VAD oracle", { timeout: 300_000 }, () => {
  it("256 interleaved streams over 64 clients answer bit for bit as each stream run alone", async () => {
    const audio = Array.from({ length: STREAMS }, (_, s) => sequenceAudio(s, CHUNKS));
    const expected = await expectedBits(audio);
    // The audio makes the detector say different things: not all answers are alike.
    assert.ok(new Set(expected.flatMap((bits) => [...bits])).size > STREAMS);

    const served: number[][] = Array.from({ length: STREAMS }, () => []);
    const next = new Array<number>(STREAMS).fill(0);
    const idle = Array.from({ length: STREAMS }, (_, s) => s);
    const failures: string[] = [];
    const agent = new Agent({ keepAlive: true, maxSockets: CLIENTS });
    const url = new URL(`${server.url}/v2/models/${MODEL}/infer`);
    const client = async (seed: number) => {
      const rng = seeded(seed);
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
    const mismatches = served.map((bits, s) => firstMismatch(s, bits, expected[s]!)).filter(Boolean);
    assert.deepEqual(mismatches, []);

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
