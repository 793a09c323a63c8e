import {
  finish,
  newSegmenter,
  pushChunk,
  type SpeechEvent,
} from "../../examples/models/vad_segmenter/1/segmenter.ts";
import { expectedBits, SILERO_SAMPLES, sequenceAudio } from "./silero-oracle.ts";

// Audio streams for the vad_segmenter example, and the speech events each must bring: the
// example's own segmenter run on the probabilities ONNX Runtime gives in this process for
// the stream alone at batch 1 (the oracle), whatever batches the server forms.

export interface SegmenterStreams {
  /** Each stream's samples, whole. */
  readonly audio: Float32Array[];
  /** Each stream's events, in order. */
  readonly expected: SpeechEvent[][];
}

/** One stream of `chunks` Silero chunks per seed (sequenceAudio's), with its events. */
export async function segmenterStreams(seeds: readonly number[], chunks: number): Promise<SegmenterStreams> {
  const streams = seeds.map((seed) => sequenceAudio(seed, chunks));
  const bits = await expectedBits(streams);
  const audio = streams.map((stream) => {
    const all = new Float32Array(stream.length * SILERO_SAMPLES);
    for (const [i, chunk] of stream.entries()) all.set(chunk, i * SILERO_SAMPLES);
    return all;
  });
  const expected = bits.map((stream) => {
    const state = newSegmenter();
    const events = [...new Float32Array(stream.buffer)].flatMap((p) => pushChunk(state, p, SILERO_SAMPLES));
    return [...events, ...finish(state)];
  });
  return { audio, expected };
}

/** `samples` in pieces of `size` samples, the last one shorter (views, not copies). */
export function pieces(samples: Float32Array, size: number): Float32Array[] {
  const out: Float32Array[] = [];
  for (let i = 0; i < samples.length; i += size) out.push(samples.subarray(i, i + size));
  return out;
}
