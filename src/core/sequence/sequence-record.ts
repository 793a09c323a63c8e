import { deserialize, serialize } from "node:v8";
import { internal } from "../errors.ts";
import type { Parameters } from "../infer.ts";
import type { Tensor } from "../tensor.ts";
import type { SequenceState, StateEntry } from "./state-store.ts";
import type { StepAnswer } from "./step-answers.ts";

// A sequence as one serialisable value: what a tier keeps of it between steps, so that
// any replica can take it up. node:v8's structured-clone format keeps typed arrays,
// bigints and maps exactly, writes a view's bytes only (a row of a state slab, not the
// slab), and model code's values are already bytes in it.

/** Bumped when the layout changes; a record of another layout is refused by name. */
const RECORD_FORMAT = 3;

export interface SequenceRecordBody {
  /** Steps applied in the sequence's current life. */
  readonly applied: number;
  /** Its state after the last applied step (undefined before the first, or after the END). */
  readonly state: SequenceState | undefined;
  /** The recorded answers of its last numbered steps, oldest first. */
  readonly answers: readonly StepAnswer[];
  readonly createdMs: number;
  /** When it ends by itself (a SageMaker session's expiry). */
  readonly expiresAtMs: number | undefined;
  /** The caller that started it (an API key's name): it stays the only one that may use it. */
  readonly owner: string | undefined;
}

interface EncodedAnswer {
  readonly step: number;
  readonly outputs: [string, Tensor][];
  readonly parameters: Parameters;
}

interface Encoded {
  readonly format: number;
  readonly applied: number;
  readonly state: [string, StateEntry][] | undefined;
  /** Each answer encoded on its own, once: a sequence writes the same answers with several steps. */
  readonly answers: Uint8Array[];
  readonly createdMs: number;
  readonly expiresAtMs: number | undefined;
  readonly owner: string | undefined;
}

/** Answers recorded here, encoded once each (answers read from a record keep their bytes). */
const answerBytes = new WeakMap<StepAnswer, Uint8Array>();

function encodedAnswer(answer: StepAnswer): Uint8Array {
  let bytes = answer.encoded ?? answerBytes.get(answer);
  if (bytes === undefined) {
    const plain: EncodedAnswer = {
      step: answer.step,
      outputs: [...answer.outputs],
      parameters: answer.parameters,
    };
    bytes = serialize(plain);
    answerBytes.set(answer, bytes);
  }
  return bytes;
}

export function encodeRecordBody(body: SequenceRecordBody): Uint8Array {
  const encoded: Encoded = {
    format: RECORD_FORMAT,
    applied: body.applied,
    state: body.state === undefined ? undefined : [...body.state],
    answers: body.answers.map(encodedAnswer),
    createdMs: body.createdMs,
    expiresAtMs: body.expiresAtMs,
    owner: body.owner,
  };
  return serialize(encoded);
}

export function decodeRecordBody(bytes: Uint8Array, what: string): SequenceRecordBody {
  let encoded: Encoded;
  try {
    encoded = deserialize(bytes) as Encoded;
  } catch (error) {
    throw internal(`the state store's record of ${what} cannot be read: ${(error as Error).message}`, error);
  }
  if (encoded?.format !== RECORD_FORMAT) {
    throw internal(
      `the state store's record of ${what} has format ${String(encoded?.format)}, this server reads format ${RECORD_FORMAT}`,
    );
  }
  return {
    applied: encoded.applied,
    state: encoded.state === undefined ? undefined : new Map(encoded.state),
    answers: encoded.answers.map((bytes) => {
      const a = deserialize(bytes) as EncodedAnswer;
      return { step: a.step, outputs: new Map(a.outputs), parameters: a.parameters, encoded: bytes };
    }),
    createdMs: encoded.createdMs,
    expiresAtMs: encoded.expiresAtMs,
    owner: encoded.owner,
  };
}
