// Speech segments from Silero VAD's per-chunk speech probabilities, as Silero's own
// VADIterator finds them: speech starts at the first chunk at or above `threshold`, and
// ends where the probability fell below `threshold - 0.15`, once it has stayed there for
// `minSilenceSamples`. A plain object, so the handler keeps it in a sequence's state.

export interface SegmenterState {
  /** Samples seen so far (the next chunk starts here). */
  position: number;
  speaking: boolean;
  /** Where the current silence began (0: none). */
  silenceStart: number;
}

export interface SpeechEvent {
  readonly event: "speech_start" | "speech_end";
  /** Sample index where it happened (16 kHz). */
  readonly sample: number;
}

export interface SegmenterOptions {
  readonly threshold: number;
  readonly minSilenceSamples: number;
}

const DEFAULT_SEGMENTER: SegmenterOptions = { threshold: 0.5, minSilenceSamples: 1600 };

export function newSegmenter(): SegmenterState {
  return { position: 0, speaking: false, silenceStart: 0 };
}

/** The events the chunk of `samples` samples with speech probability `probability` brings. */
export function pushChunk(
  state: SegmenterState,
  probability: number,
  samples: number,
  options: SegmenterOptions = DEFAULT_SEGMENTER,
): SpeechEvent[] {
  const events: SpeechEvent[] = [];
  const start = state.position;
  state.position += samples;
  if (probability >= options.threshold) {
    state.silenceStart = 0;
    if (!state.speaking) {
      state.speaking = true;
      events.push({ event: "speech_start", sample: start });
    }
  } else if (state.speaking && probability < options.threshold - 0.15) {
    if (state.silenceStart === 0) state.silenceStart = state.position;
    if (state.position - state.silenceStart >= options.minSilenceSamples) {
      events.push({ event: "speech_end", sample: state.silenceStart });
      state.speaking = false;
      state.silenceStart = 0;
    }
  }
  return events;
}

/** At the end of the audio: speech still going ends where the audio does. */
export function finish(state: SegmenterState): SpeechEvent[] {
  if (!state.speaking) return [];
  state.speaking = false;
  return [{ event: "speech_end", sample: state.silenceStart === 0 ? state.position : state.silenceStart }];
}
