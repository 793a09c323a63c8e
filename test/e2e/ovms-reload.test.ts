import assert from "node:assert/strict";
import { Writable } from "node:stream";
import { after, before, test } from "node:test";
import { pino } from "pino";
import { OnnxModelBuilder } from "../../tools/onnx/onnx-model-builder.ts";
import { getJson, postJson } from "../support/http-client.ts";
import {
  expectedBits,
  firstMismatch,
  fp32Bits,
  SILERO_PATH,
  sequenceAudio,
} from "../support/silero-oracle.ts";
import { type OvmsModel, type OvmsServer, startOvmsServer } from "../tfs/support/ovms-server.ts";
import { TfsClient } from "../tfs/support/tfs-client.ts";
import { grpcStep, type StepOutcome } from "../tfs/support/vad-steps.ts";
import { waitUntil } from "./support/serving.ts";

// OVMS's config reload (--file_system_poll_wait_seconds), which in OVMS drops every live
// sequence: config.json is edited while 16 Silero VAD sequences stream over gRPC.
// - A compatible change (a new max_sequence_number) swaps the model in, and every
//   sequence goes on on the new version with its state: all answers bit-exact.
// - Switching `stateful` off is refused (OVMS: "Model type cannot be changed after it is
//   loaded"): the model keeps serving its sequences.
// - A new version whose state has another shape ends the live sequences with the reason
//   "reloaded", which the sequences API counts; their clients are told.
// - A model removed from the file is unloaded; its sequences end ("unloaded").

const STREAMS = 16;
const CHANNELS = 4;
const MAX_CHUNKS = 2000;

/** Silero-shaped, but with a [2, batch, 64] state: a version the live sequences' state does not fit. */
const otherState = new OnnxModelBuilder({ opset: 17 })
  .input("input", "FP32", ["batch", "samples"])
  .input("state", "FP32", [2, "batch", 64])
  .input("sr", "INT64", [])
  .output("output", "FP32", ["batch", 1])
  .output("stateN", "FP32", [2, "batch", 64])
  .node("ReduceMean", ["input"], ["output"], { axes: [1], keepdims: 1 })
  .node("Identity", ["state"], ["stateN"])
  .toBytes();

const vad = (config: Record<string, unknown>, versions: OvmsModel["onnx"] = SILERO_PATH): OvmsModel => ({
  config: { stateful: true, ...config },
  onnx: versions,
});

const logLines: Record<string, unknown>[] = [];
let ovms: OvmsServer;
const clients: TfsClient[] = [];
before(async () => {
  const sink = new Writable({
    write(chunk: Buffer, _encoding, done) {
      for (const line of chunk.toString().split("\n")) if (line !== "") logLines.push(JSON.parse(line));
      done();
    },
  });
  ovms = await startOvmsServer(
    { vad: vad({ max_sequence_number: 100 }), other: vad({}) },
    { configPollSecs: 1 },
    pino({ level: "info" }, sink),
  );
  for (let c = 0; c < CHANNELS; c++) clients.push(new TfsClient(ovms.grpcPort));
});
after(async () => {
  for (const client of clients) client.close();
  await ovms.stop();
});

interface Stream {
  readonly bits: number[];
  /** The refusal that ended it, if one did. */
  refusal: StepOutcome | undefined;
}

/**
 * Streams `sequences` chunk by chunk (each sequence's chunks in order, all sequences at
 * once) until `stop()` says so, then ends them; a refused step ends a stream there.
 */
function streamAll(
  model: string,
  first: number,
  audio: Float32Array[][],
  stop: () => boolean,
): Promise<Stream[]> {
  return Promise.all(
    audio.map(async (chunks, s) => {
      const stream: Stream = { bits: [], refusal: undefined };
      const id = BigInt(first + s);
      const client = clients[s % CHANNELS]!;
      for (let c = 0; c < MAX_CHUNKS; c++) {
        const last = c === MAX_CHUNKS - 1 || (c > 0 && stop());
        const outcome = await grpcStep(client, model, {
          id,
          control: c === 0 ? 1 : last ? 2 : undefined,
          audio: chunks[c]!,
        });
        if (!outcome.ok) {
          stream.refusal = outcome;
          return stream;
        }
        stream.bits.push(fp32Bits(outcome.output));
        if (last) return stream;
      }
      return stream;
    }),
  );
}

async function maxCandidates(model: string): Promise<number | undefined> {
  const config = (await getJson(`${ovms.url}/v2/models/${model}/config`)).body as {
    sequence_batching?: { oldest?: { max_candidate_sequences: number } };
  };
  return config.sequence_batching?.oldest?.max_candidate_sequences;
}

async function summary(model: string) {
  return (
    (await getJson(`${ovms.url}/v2/models/${model}/sequences`)).body as {
      summary: { live: number; ended: Record<string, number> };
    }
  ).summary;
}

const audioFor = (first: number) =>
  Array.from({ length: STREAMS }, (_, s) => sequenceAudio(first + s, MAX_CHUNKS).slice(0, 400));

test("a compatible change keeps all 16 streaming sequences exact; switching stateful is refused", {
  timeout: 240_000,
}, async () => {
  const audio = audioFor(0);
  let reloaded = false;
  let after = 0;
  const streams = streamAll("vad", 1, audio, () => reloaded && ++after > STREAMS * 10);
  // Every sequence is under way before the file changes.
  await waitUntil("the sequences to be live", async () => (await summary("vad")).live === STREAMS);
  ovms.write({ vad: vad({ max_sequence_number: 200 }), other: vad({}) });
  await waitUntil("the change to be applied", async () => (await maxCandidates("vad")) === 200);
  reloaded = true;
  const served = await streams;

  const expected = await expectedBits(served.map((stream, s) => audio[s]!.slice(0, stream.bits.length)));
  for (let s = 0; s < STREAMS; s++) {
    assert.equal(served[s]!.refusal, undefined, JSON.stringify(served[s]!.refusal));
    assert.equal(firstMismatch(s, served[s]!.bits, expected[s]!), undefined);
  }
  assert.ok(
    logLines.some((l) => l.event === "sequences_moved" && l.model === "vad" && (l.count as number) > 0),
    "the reload moved live sequences",
  );
  const after16 = await summary("vad");
  assert.deepEqual([after16.live, after16.ended.end, after16.ended.reloaded], [0, STREAMS, 0]);

  // Switching stateful off: refused, logged, and the model still serves sequences.
  const failures = logLines.length;
  ovms.write({ vad: { config: { stateful: false }, onnx: SILERO_PATH }, other: vad({}) });
  await waitUntil("the refusal", async () =>
    logLines.slice(failures).some((l) => l.event === "model_load_failed" && l.model === "vad"),
  );
  const refusal = logLines.slice(failures).find((l) => l.event === "model_load_failed")!;
  assert.match(String(refusal.reason), /^Model type cannot be changed after it is loaded/);
  const check = await streamAll("vad", 100, audioFor(100).slice(0, 2), () => true);
  assert.deepEqual(
    check.map((s) => [s.refusal, s.bits.length]),
    [
      [undefined, 2],
      [undefined, 2],
    ],
  );
  ovms.write({ vad: vad({ max_sequence_number: 200 }), other: vad({}) });
});

test("a new version whose state does not fit ends the 16 live sequences with reason 'reloaded'; a removed model's end 'unloaded'", {
  timeout: 240_000,
}, async () => {
  const audio = audioFor(200);
  const streams = streamAll("vad", 201, audio, () => false);
  const others = streamAll("other", 301, audioFor(300).slice(0, 4), () => false);
  await waitUntil("the sequences to be live", async () => (await summary("vad")).live === STREAMS);
  await waitUntil("the other sequences to be live", async () => (await summary("other")).live === 4);
  ovms.write({ vad: vad({ max_sequence_number: 200 }, { 1: SILERO_PATH, 2: otherState }) });
  const served = await streams;
  const gone = await others;

  const expected = await expectedBits(served.map((stream, s) => audio[s]!.slice(0, stream.bits.length)));
  for (let s = 0; s < STREAMS; s++) {
    const { refusal, bits } = served[s]!;
    // Exact up to the reload, then told: queued requests with the reason, later ones that the id is gone.
    assert.equal(firstMismatch(s, bits, expected[s]!), undefined);
    assert.ok(refusal !== undefined && !refusal.ok, `sequence ${s} was not ended`);
    if (refusal !== undefined && !refusal.ok) {
      assert.ok(
        (refusal.code === 14 && /was reloaded and its state changed/.test(refusal.message)) ||
          (refusal.code === 5 && refusal.message === "Sequence with provided ID does not exist"),
        `${refusal.code} ${refusal.message}`,
      );
    }
  }
  const version2 = await summary("vad");
  assert.equal(version2.ended.reloaded, STREAMS);
  assert.equal(version2.live, 0);
  assert.ok(logLines.some((l) => l.event === "sequences_ended" && l.model === "vad" && l.count === STREAMS));
  // Version 1, replaced, is retired: OVMS's 404 on its API, Triton's 503 on KServe's.
  const retired = await postJson(`${ovms.url}/v1/models/vad/versions/1:predict`, { inputs: {} });
  assert.deepEqual(
    [retired.status, retired.body],
    [404, { error: "Model with requested version is retired" }],
  );
  const kserve = await postJson(`${ovms.url}/v2/models/vad/versions/1/infer`, { inputs: [] });
  assert.deepEqual(
    [kserve.status, kserve.body],
    [503, { error: "Request for unknown model: 'vad' version 1 is not at ready state" }],
  );
  // The removed model's sequences ended too.
  for (const stream of gone) assert.ok(stream.refusal !== undefined && !stream.refusal.ok);
  // A removed model has no version left: OVMS's 404 "not found" (not a 503 to retry);
  // on KServe's API Triton's 404 with its own words.
  const removed = await postJson(`${ovms.url}/v1/models/other:predict`, { inputs: {} });
  assert.deepEqual(
    [removed.status, removed.body],
    [404, { error: "Model with requested version is not found" }],
  );
  const removedKserve = await postJson(`${ovms.url}/v2/models/other/infer`, { inputs: [] });
  assert.deepEqual(
    [removedKserve.status, removedKserve.body],
    [404, { error: "Request for unknown model: 'other' has no available versions" }],
  );
  // As OVMS, the retired version stays listed, in state END.
  assert.deepEqual((await getJson(`${ovms.url}/v1/models/other`)).body, {
    model_version_status: [{ version: "1", state: "END", status: { error_code: "OK", error_message: "OK" } }],
  });
});
