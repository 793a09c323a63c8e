import type { Handler, HandlerContext, HandlerRequest, Tensor } from "seqserve";
import { finish, newSegmenter, pushChunk, type SegmenterState, type SpeechEvent } from "./segmenter.ts";

// Speech segments as they happen: audio in (16 kHz FP32, any number of samples per
// request), `speech_start` / `speech_end` events out, each the moment its chunk has been
// scored (a decoupled model: a request may bring no event, or several). The scores come
// from silero_vad_stateful, called with context.infer as one sequence per stream: that
// model keeps Silero's recurrent state, and batches this stream's chunks with every other
// stream's. This handler keeps, per stream, the id of that sequence, the samples left
// over from the last request (Silero takes 512 at a time) and the segmenter's state.

const VAD = "silero_vad_stateful";
const CHUNK = 512;
const RATE = 16000;
const SAMPLE_RATE: Tensor = { datatype: "INT64", shape: [], data: BigInt64Array.of(BigInt(RATE)) };

function eventOutputs(event: SpeechEvent): Record<string, Tensor> {
  return {
    EVENT: { datatype: "BYTES", shape: [1, 1], data: [new TextEncoder().encode(event.event)] },
    SAMPLE: { datatype: "INT64", shape: [1, 1], data: BigInt64Array.of(BigInt(event.sample)) },
    TIME: { datatype: "FP64", shape: [1, 1], data: Float64Array.of(event.sample / RATE) },
  };
}

async function segment(request: HandlerRequest, context: HandlerContext): Promise<void> {
  const sequence = request.sequence;
  if (sequence === undefined) throw new Error("vad_segmenter follows streams: send a sequence");
  const { state } = sequence;
  const segmenter = state.get<SegmenterState>("segmenter") ?? newSegmenter();
  let vad = state.get<bigint | string>("vad_sequence");
  const leftover = (state.get<Tensor>("leftover")?.data as Float32Array | undefined) ?? new Float32Array(0);
  const input = request.inputs.AUDIO!.data as Float32Array;
  const audio = new Float32Array(leftover.length + input.length);
  audio.set(leftover);
  audio.set(input, leftover.length);

  // A request that does not finish (cancelled, failed) leaves the state as it was: a VAD
  // sequence it started would be in no state, so sequenceEnded could not end it. It ends
  // here instead.
  const starts = vad === undefined;
  let finished = false;
  try {
    let offset = 0;
    for (; offset + CHUNK <= audio.length; offset += CHUNK) {
      if (request.signal.aborted) return;
      const scored = await context.infer(VAD, {
        inputs: {
          input: { datatype: "FP32", shape: [1, CHUNK], data: audio.slice(offset, offset + CHUNK) },
          sr: SAMPLE_RATE,
        },
        // The first chunk starts the VAD's sequence; the server gives it an id.
        parameters: vad === undefined ? { sequence_start: true } : { sequence_id: vad },
      });
      vad ??= scored.parameters.sequence_id as bigint;
      const probability = (scored.outputs.output!.data as Float32Array)[0]!;
      for (const event of pushChunk(segmenter, probability, CHUNK))
        await request.send({ outputs: eventOutputs(event) });
    }
    // A client that left while the last chunk's events went out has ended the request:
    // a state changed now would not be kept (and the log would say so).
    if (request.signal.aborted) return;
    if (sequence.end) {
      for (const event of finish(segmenter)) await request.send({ outputs: eventOutputs(event) });
      if (vad !== undefined) await context.closeSequence(VAD, vad);
      // The VAD sequence is closed: nothing is left for the finally block to end.
      finished = true;
      if (!request.signal.aborted) state.clear();
    } else {
      state.set("segmenter", segmenter);
      if (vad !== undefined) state.set("vad_sequence", vad);
      state.set("leftover", { datatype: "FP32", shape: [audio.length - offset], data: audio.slice(offset) });
    }
    finished = true;
  } finally {
    if (!finished && starts && vad !== undefined) {
      await context.closeSequence(VAD, vad).catch((error: Error) => {
        context.log.warn("could not end a VAD sequence", { vad: String(vad), error: error.message });
      });
    }
  }
}

export default {
  execute(requests, context) {
    for (const request of requests) {
      segment(request, context).then(
        () => request.complete(),
        (error: Error) => request.complete(error),
      );
    }
  },
  async sequenceEnded(sequence, _reason, context) {
    // A final request ends the VAD sequence and clears the state. A stream that ended any
    // other way (cancelled, timed out, or with reason "end" but no audio: a WebSocket
    // closed with 1000, a SageMaker CLOSE) still holds it: end it too.
    const vad = sequence.state.get<bigint | string>("vad_sequence");
    if (vad !== undefined) await context.closeSequence(VAD, vad);
  },
} satisfies Handler;
