import { type ErrorReason, ServerError } from "../errors.ts";
import type { Refusals } from "../refusals.ts";
import type { StateStore } from "./state-store.ts";

// The server's budget of sequence state, in bytes (--max-state-bytes): every model's
// sequences together. A model alone is bounded by its sequence count times its
// sequence_state_max_bytes, which for growing state (a handler's chat history, a
// decoder's cache) can be far more than the machine has: 1,024 sessions of 64 MiB.
//
// What is held is read from the stores themselves, so it cannot drift from them. A step
// whose state would take the total past the budget fails, and its state stays as it was:
// the core refuses it where it keeps state a batch gave back; a handler's worker refuses
// it, told with each request how far the state may grow (the state was lent to it, so
// only it still has the state as it was). A handler's step is checked against the room
// left when it was sent: steps running at the same moment may together pass the budget by
// what they add (each at most its model's sequence_state_max_bytes), and a step may be
// refused for want of room that others freed while it ran (a long decoupled one most).
// An END is never refused: it frees its state.

export class StateBudget {
  readonly maxBytes: number;
  readonly #stores = new Set<StateStore>();
  readonly #refusals: Refusals | undefined;

  constructor(maxBytes: number, refusals?: Refusals) {
    this.maxBytes = maxBytes;
    this.#refusals = refusals;
  }

  /** Counts `store`'s state in the budget until the returned function is called. */
  count(store: StateStore): () => void {
    this.#stores.add(store);
    return () => this.#stores.delete(store);
  }

  /** Bytes every sequence's state holds. */
  get heldBytes(): number {
    let held = 0;
    for (const store of this.#stores) held += store.totalBytes;
    return held;
  }

  /** The most bytes a sequence whose state holds `bytesNow` may hold after its step. */
  roomFor(bytesNow: number): number {
    return bytesNow + Math.max(0, this.maxBytes - this.heldBytes);
  }

  /**
   * The refusal for the step `step()` names, whose state would go from `bytesNow` to
   * `bytesAfter`; undefined when it fits (or does not grow).
   */
  refusal(bytesNow: number, bytesAfter: number, step: () => BudgetedStep): ServerError | undefined {
    if (bytesAfter <= bytesNow || bytesAfter <= this.roomFor(bytesNow)) return undefined;
    this.counted();
    return stateBudgetExceeded(step(), bytesAfter, this.maxBytes);
  }

  /** Counts a refusal made elsewhere (by a handler's worker). */
  counted(): void {
    this.#refusals?.refused("state_bytes");
  }
}

/** A step as a refusal names it. */
export interface BudgetedStep {
  readonly model: string;
  /** The sequence's id as messages write it; undefined for one the server assigned to a START. */
  readonly id: string | undefined;
  /** A START: refused, the sequence is not started (and a restarted one's old life is over). */
  readonly starts: boolean;
}

/**
 * When a step refused for the budget may be tried again: room comes back as other
 * sequences step smaller or end, so the refusal is "the server is full now, retry later",
 * as seqserve's other full-server refusals (a full backlog, --max-queued-start-bytes).
 * Each protocol family answers it with its own such status (its error table).
 */
export const STATE_BUDGET_RETRY_AFTER_SECONDS = 1;

/** The error for a step whose state the server's budget cannot keep. */
export function stateBudgetExceeded(step: BudgetedStep, bytes: number, maxBytes: number): ServerError {
  const sequence = step.starts
    ? `a new sequence${step.id === undefined ? "" : ` ${step.id}`}`
    : `sequence ${step.id}`;
  return new ServerError(
    "RESOURCE_EXHAUSTED",
    `the state of ${sequence} of model '${step.model}' would hold ${bytes} bytes, more than the server's sequence state memory has left (--max-state-bytes ${maxBytes}, for every model's sequences together): ${refusedStepOutcome(step.starts)}`,
    { reason: "state_budget", retryAfterSeconds: STATE_BUDGET_RETRY_AFTER_SECONDS },
  );
}

/** What a step refused for its state leaves: a START began nothing; another step, the state as it was. */
export const refusedStepOutcome = (starts: boolean): string =>
  starts ? "the sequence is not started" : "the step is not applied, and the state stays as it was";

/**
 * Whether `reason` refused a step's state: the server's budget, or its model's bound on one
 * sequence. A START so refused leaves no sequence (as one refused before it ran): a client
 * that went on without it would step from an empty state.
 */
export const refusedState = (reason: ErrorReason | undefined): boolean =>
  reason === "state_budget" || reason === "state_bound";
