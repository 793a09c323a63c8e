import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import ort from "onnxruntime-node";
import { seeded } from "../../src/bench/seeded-random.ts";

// What the Silero VAD oracle tests share (test/e2e/*-silero-oracle.test.ts): the real
// model and its example stateful config, audio-like chunks that make the detector say
// many different things, and the expected answers — ONNX Runtime in this process, each
// sequence alone at batch 1 with stateN fed back as state, with the server's session
// options. A sequence served through seqserve must give exactly these bits.

export const SILERO_PATH = fileURLToPath(
  new URL("../../examples/models/silero_vad/1/model.onnx", import.meta.url),
);
export const SILERO_STATEFUL_CONFIG = readFileSync(
  new URL("../../examples/models/silero_vad_stateful/config.pbtxt", import.meta.url),
  "utf8",
);
export const SILERO_STATEFUL_MODEL = "silero_vad_stateful";

export const SILERO_SAMPLES = 512;
export const SILERO_SAMPLE_RATE = 16000n;
/** `sr` as the raw bytes of an INT64 scalar. */
export const SILERO_SR_BYTES = Buffer.from(BigInt64Array.of(SILERO_SAMPLE_RATE).buffer);

/** One sequence's audio: a chirp that comes and goes over a noise floor, so the detector's answers vary. */
export function sequenceAudio(sequence: number, chunks: number): Float32Array[] {
  const random = seeded(0x5eed + sequence);
  const base = 120 + random() * 250;
  const level = 0.02 + random() * 0.6;
  const floor = 0.001 + random() * 0.03;
  const period = 4 + Math.floor(random() * 12);
  const rate = Number(SILERO_SAMPLE_RATE);
  const audio: Float32Array[] = [];
  let phase = 0;
  for (let c = 0; c < chunks; c++) {
    const on = Math.floor(c / period) % 2 === 0;
    const chunk = new Float32Array(SILERO_SAMPLES);
    for (let i = 0; i < SILERO_SAMPLES; i++) {
      const t = (c * SILERO_SAMPLES + i) / rate;
      phase += (2 * Math.PI * base * (1 + 0.3 * Math.sin(2 * Math.PI * 3 * t))) / rate;
      const voice = on
        ? level * (Math.sin(phase) + 0.4 * Math.sin(2 * phase) + 0.2 * Math.sin(5 * phase))
        : 0;
      chunk[i] = voice + floor * (random() * 2 - 1);
    }
    audio.push(chunk);
  }
  return audio;
}

/** The bit pattern of an FP32 value: answers are compared bit for bit. */
export const fp32Bits = (value: number): number => new Uint32Array(Float32Array.of(value).buffer)[0]!;

/** Each sequence alone, at batch 1, with the server's session options: the expected output bits. */
export async function expectedBits(audio: readonly Float32Array[][]): Promise<Uint32Array[]> {
  const session = await ort.InferenceSession.create(SILERO_PATH, {
    intraOpNumThreads: 1,
    executionMode: "sequential",
    graphOptimizationLevel: "all",
  });
  try {
    const sr = new ort.Tensor("int64", BigInt64Array.of(SILERO_SAMPLE_RATE), []);
    const expected: Uint32Array[] = [];
    for (const chunks of audio) {
      const bits = new Uint32Array(chunks.length);
      let state = new ort.Tensor("float32", new Float32Array(2 * 128), [2, 1, 128]);
      for (let c = 0; c < chunks.length; c++) {
        const input = new ort.Tensor("float32", chunks[c]!, [1, SILERO_SAMPLES]);
        const result = await session.run({ input, state, sr });
        bits[c] = fp32Bits((result.output!.data as Float32Array)[0]!);
        state = result.stateN as typeof state;
      }
      expected.push(bits);
    }
    return expected;
  } finally {
    await session.release();
  }
}

/** The first chunk whose served bits differ from the expected ones, described; undefined when all agree. */
export function firstMismatch(
  sequence: number,
  served: ArrayLike<number>,
  expected: Uint32Array,
): string | undefined {
  if (served.length !== expected.length) {
    return `sequence ${sequence}: ${served.length} answers for ${expected.length} chunks`;
  }
  for (let c = 0; c < expected.length; c++) {
    if (served[c] !== expected[c]) {
      return `sequence ${sequence}, chunk ${c}: served 0x${served[c]?.toString(16)}, expected 0x${expected[c]!.toString(16)}`;
    }
  }
  return undefined;
}
