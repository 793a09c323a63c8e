import { ServerError } from "../errors.ts";
import type { Parameters, SequenceId } from "../infer.ts";
import type { RequestResult } from "../scheduler/pending-request.ts";
import { cloneTensor, type Tensor, tensorHeldBytes } from "../tensor.ts";
import { formatSequenceId } from "./sequence-parameters.ts";

// Exactly-once steps. A request may say which step of its sequence it is
// (`sequence_step`: 1 for the START, 2 for the next…). A sequence counts the steps it has
// applied, and keeps the answers of its last few steps that carried a number, so that a
// client retrying a step whose answer it never received (a replica died mid-request, a
// connection dropped) gets that answer again instead of the step running twice. The
// answers kept are bounded in count and in bytes per sequence.

/** The answers a sequence keeps at most, and the bytes they may take together. */
export const STEP_ANSWERS_KEPT = 4;
export const STEP_ANSWERS_MAX_BYTES = 256 * 1024;

/** The answer of one applied step: what its client was (or would have been) sent. */
export interface StepAnswer {
  readonly step: number;
  readonly outputs: ReadonlyMap<string, Tensor>;
  readonly parameters: Parameters;
  /** Its encoding in a tier's record, when it was read from one (sequence-record.ts). */
  readonly encoded?: Uint8Array;
}

function answerBytes(answer: StepAnswer): number {
  let bytes = 64;
  for (const [name, tensor] of answer.outputs) bytes += name.length + tensorHeldBytes(tensor);
  return bytes;
}

/** The last answers of one sequence, oldest first. */
export class StepAnswers {
  readonly #answers: StepAnswer[];
  #bytes = 0;

  constructor(answers: readonly StepAnswer[] = []) {
    this.#answers = [];
    for (const answer of answers) this.record(answer);
  }

  get all(): readonly StepAnswer[] {
    return this.#answers;
  }

  /** What the answers hold (estimated), at most STEP_ANSWERS_MAX_BYTES. */
  get bytes(): number {
    return this.#bytes;
  }

  /** Keeps `answer` (it owns its tensors), forgetting the oldest beyond the bounds. */
  record(answer: StepAnswer): void {
    const bytes = answerBytes(answer);
    if (bytes > STEP_ANSWERS_MAX_BYTES) return;
    this.#answers.push(answer);
    this.#bytes += bytes;
    while (this.#answers.length > STEP_ANSWERS_KEPT || this.#bytes > STEP_ANSWERS_MAX_BYTES) {
      this.#bytes -= answerBytes(this.#answers.shift()!);
    }
  }

  get(step: number): StepAnswer | undefined {
    for (const answer of this.#answers) if (answer.step === step) return answer;
    return undefined;
  }

  /** These answers and `answer` (a copy: a step's answers commit only with the step). */
  with(answer: StepAnswer): StepAnswers {
    const next = new StepAnswers(this.#answers);
    next.record(answer);
    return next;
  }
}

/** A step's answer as kept: the outputs are copied out of the batch they came from. */
export function stepAnswer(step: number, result: RequestResult): StepAnswer {
  const outputs = new Map<string, Tensor>();
  for (const [name, tensor] of result.outputs) outputs.set(name, cloneTensor(tensor));
  return { step, outputs, parameters: { ...result.parameters } };
}

/** What to do with a request that gives its step, for a sequence that has applied `applied` steps. */
export type StepCheck =
  | { readonly kind: "run" }
  | { readonly kind: "answered"; readonly answer: StepAnswer }
  | { readonly kind: "refused"; readonly error: ServerError };

export function checkStep(
  step: number,
  applied: number,
  answers: StepAnswers | undefined,
  id: SequenceId,
  model: string,
  /** The request is a decoupled model's: its responses went out as they came, and none is kept. */
  decoupled = false,
): StepCheck {
  if (step === applied + 1) return { kind: "run" };
  const sequence = `sequence ${formatSequenceId(id)} of model '${model}'`;
  if (step <= applied) {
    const answer = answers?.get(step);
    if (answer !== undefined) return { kind: "answered", answer };
    // A step among the last few with no answer kept was most likely sent without its
    // number (an answer too large to keep is the other way): its client retries it
    // numbered now, after a failure that says the step may have been applied, and is told
    // that only the number on the first sending makes a retry safe, for next time.
    const why = decoupled
      ? "a decoupled model's responses go out as they are made, and none is kept to send again"
      : applied - step < STEP_ANSWERS_KEPT
        ? `it was sent without a sequence_step, or its answer did not fit in the ${STEP_ANSWERS_MAX_BYTES / 1024} KiB of answers kept: only a step sent with its sequence_step from the first can be retried safely`
        : `the sequence has applied ${applied} steps; only the answers of the last ${STEP_ANSWERS_KEPT} steps sent with a step number are kept`;
    return {
      kind: "refused",
      error: new ServerError(
        "FAILED_PRECONDITION",
        `step ${step} of ${sequence} was already applied and its answer is no longer kept (${why})`,
      ),
    };
  }
  return {
    kind: "refused",
    error: new ServerError(
      "FAILED_PRECONDITION",
      `step ${step} of ${sequence} cannot run yet: the sequence has applied ${applied} steps, so the next is step ${applied + 1}`,
    ),
  };
}
