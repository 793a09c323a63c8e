import { ServerError } from "../errors.ts";
import type { Refusals } from "../refusals.ts";
import { requestLabel } from "../request-label.ts";
import { type Tensor, tensorHeldBytes } from "../tensor.ts";

// The server's budget of bytes for STARTs admitted and not yet running
// (--max-queued-start-bytes), every model's together. A sequence backlog is bounded by a
// count (sequence_backlog_limit, 1024), which says nothing of size, and a START waits
// there until a slot frees, for as long as the sequences holding the slots live: one
// client filling a model's slots with tiny sessions could park a thousand 64 MiB STARTs.
//
// Only STARTs count. The other requests are steps of sequences begun (their ENDs free the
// slots the backlog waits for: refusing them for the backlog's bytes would keep it full),
// stateless requests (a queue the model drains as fast as it runs) and calls from model
// code; each is bounded by its connection or stream (--max-held-request-bytes, the body
// and message limits).
//
// A START that finds no free slot holds its input bytes here from when it joins the
// backlog until it is handed to a model instance or answered, whichever comes first
// (PendingRequest gives them back, once, on either); one moved to a reloaded version keeps
// what it holds; one that finds a slot holds nothing. One that would take the total past
// the budget is refused instead of joining the backlog, as a full backlog refuses it:
// UNAVAILABLE (503) with Retry-After. One larger than the whole budget is taken while
// nothing else is held, so that it is not told to retry for ever. The count is an add and
// a compare per START.

export class QueueBudget {
  readonly maxBytes: number;
  readonly #refusals: Refusals | undefined;
  #heldBytes = 0;

  constructor(maxBytes: number, refusals?: Refusals) {
    this.maxBytes = maxBytes;
    this.#refusals = refusals;
  }

  /** Bytes of the STARTs queued and not yet running, over every model. */
  get heldBytes(): number {
    return this.#heldBytes;
  }

  /**
   * Counts `bytes` of a START of `model` about to be queued; throws UNAVAILABLE, and
   * counts nothing, when they would take the total past the budget (unless nothing else
   * is held: one START larger than the budget waits alone).
   */
  take(bytes: number, model: string, requestId: string): void {
    if (this.#heldBytes > 0 && this.#heldBytes + bytes > this.maxBytes) {
      this.#refusals?.refused("queued_start_bytes");
      throw new ServerError(
        "UNAVAILABLE",
        `${requestLabel(requestId)}model '${model}' cannot queue the START: its ${bytes} bytes of inputs would take the STARTs waiting to run past the server's limit of ${this.maxBytes} bytes (--max-queued-start-bytes, for every model's together); retry later`,
        { retryAfterSeconds: 1 },
      );
    }
    this.#heldBytes += bytes;
  }

  give(bytes: number): void {
    this.#heldBytes -= bytes;
  }
}

/**
 * What a request's inputs count in the budget: the bytes they hold in memory
 * (tensorHeldBytes: a tensor of empty strings is not free to hold).
 */
export function queuedBytesOf(inputs: ReadonlyMap<string, Tensor>): number {
  let bytes = 0;
  for (const tensor of inputs.values()) bytes += tensorHeldBytes(tensor);
  return bytes;
}
