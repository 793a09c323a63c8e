import { ServerError } from "../errors.ts";
import type { Refusals } from "../refusals.ts";
import { requestLabel } from "../request-label.ts";
import { type Tensor, tensorHeldBytes } from "../tensor.ts";

// The server's budget of bytes for requests waiting for a sequence slot
// (--max-queued-start-bytes), every model's together. A sequence backlog is bounded by a
// count (sequence_backlog_limit, 1024), which says nothing of size, and a START waits
// there until a slot frees, for as long as the sequences holding the slots live: one
// client filling a model's slots with tiny sessions could park a thousand 64 MiB STARTs.
// Triton's backlog has no bound at all (its sequence batcher queues a backlogged
// sequence's requests without limit): this is where seqserve bounds it.
//
// A START waiting in the backlog counts, and so do the steps its client sends after it
// while it waits: they are held for the same reason, the sequence has no slot (30 steps of
// 8 MiB queued behind a 4-byte START were counted nowhere). The other requests do not:
// steps of sequences that hold a slot (their ENDs free the slots the backlog waits for:
// refusing them for the backlog's bytes would keep it full), stateless requests (a queue
// the model drains as fast as it runs) and calls from model code; each is bounded by its
// connection or stream (--max-held-request-bytes, the body and message limits).
//
// A request counts what it holds in memory: its inputs' bytes and the request itself
// (QUEUED_REQUEST_OVERHEAD, some 5 KB: counted by their inputs alone, 10,000 steps of an
// INT32 [1] queued behind a START counted 40 KB and held 50 MB).
//
// A request that waits for its sequence's slot holds its bytes here from when it is
// queued until it is handed to a model instance or answered, whichever comes first
// (PendingRequest gives them back, once, on either: a backlogged sequence dropped answers
// its steps); one moved to a reloaded version keeps what it holds; a START that finds a
// slot holds nothing. One that would take the total past the budget is refused instead of
// being queued, as a full backlog refuses a START: UNAVAILABLE (503) with Retry-After. A
// step so refused behind a START that still waits withdraws its sequence, which never
// began: the START and the steps queued behind it are refused alike, so that the client's
// later steps are told to START rather than applied without the refused one (a hole in
// the sequence that no error would show). One larger than the whole budget is
// taken while nothing else is held, so that it is not told to retry for ever. The count
// is an add and a compare per request.

export class QueueBudget {
  readonly maxBytes: number;
  readonly #refusals: Refusals | undefined;
  #heldBytes = 0;

  constructor(maxBytes: number, refusals?: Refusals) {
    this.maxBytes = maxBytes;
    this.#refusals = refusals;
  }

  /** Bytes of the requests waiting for a sequence slot, over every model. */
  get heldBytes(): number {
    return this.#heldBytes;
  }

  /**
   * Counts `bytes` (queuedBytesOf) of a request of `model` about to wait for a slot: a START, or a step of
   * `sequence` (as messages write it) queued behind its START; throws UNAVAILABLE, and
   * counts nothing, when they would take the total past the budget (unless nothing else
   * is held: one request larger than the budget waits alone). `withdraws`: refused, the
   * step withdraws its sequence, which never started (the refusal says so).
   */
  take(bytes: number, model: string, requestId: string, sequence?: string, withdraws = false): void {
    if (this.#heldBytes > 0 && this.#heldBytes + bytes > this.maxBytes) {
      this.#refusals?.refused("queued_start_bytes");
      const [what, waiting] =
        sequence === undefined
          ? ["the START", "the STARTs waiting to run"]
          : [
              `a step of sequence ${sequence}, whose START waits in the backlog for a slot`,
              "the requests waiting for a sequence slot",
            ];
      const retry = withdraws
        ? `; the sequence is withdrawn, not started: its START and every step sent behind it are refused alike, and its next request must be its START again; retry later`
        : "; retry later";
      throw new ServerError(
        "UNAVAILABLE",
        `${requestLabel(requestId)}model '${model}' cannot queue ${what}: its ${bytes} bytes (inputs, and ${QUEUED_REQUEST_OVERHEAD} for the request itself) would take ${waiting} past the server's limit of ${this.maxBytes} bytes (--max-queued-start-bytes, for every model's together)${retry}`,
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
 * What a request waiting for a slot holds in memory beyond its inputs' data: its decoded
 * message, the InferRequest and PendingRequest with their promise, its tensors' typed
 * arrays and its stream's bookkeeping; a START also its sequence's record. Measured on a
 * gRPC ModelStreamInfer stream (a model with one slot, taken; INT32 [1] requests sent
 * behind a START that waits, or STARTs of new sequences), as process.memoryUsage()
 * (heapUsed + external + arrayBuffers, after gc()) before and after, Node 20: a step
 * 4.9 to 5.2 KB each (2,000 and 10,000 of them; 7 to 9 KB each in RSS), a START 6.3 KB
 * (1,000). Counted at their tensor bytes alone, 10,000 steps of an INT32 [1] counted
 * 40 KB and held 50 MB. Every waiting request counts the larger figure, so that the budget
 * does not count less than the requests hold.
 */
export const QUEUED_REQUEST_OVERHEAD = 6400;

/**
 * What a waiting request counts in the budget: the bytes its inputs hold in memory
 * (tensorHeldBytes: a tensor of empty strings is not free to hold), plus what the request
 * itself holds (QUEUED_REQUEST_OVERHEAD).
 */
export function queuedBytesOf(inputs: ReadonlyMap<string, Tensor>): number {
  let bytes = QUEUED_REQUEST_OVERHEAD;
  for (const tensor of inputs.values()) bytes += tensorHeldBytes(tensor);
  return bytes;
}
