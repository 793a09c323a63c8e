import { ServerError } from "../errors.ts";
import type { Refusals } from "../refusals.ts";
import { requestLabel } from "../request-label.ts";
import { type BytesElements, type Tensor, tensorByteLength } from "../tensor.ts";

// The server's budget of bytes for requests admitted and not yet running
// (--max-queued-request-bytes): every model's queues together — the dynamic batcher's, a
// sequence model's backlog and its sequences' own queues, and requests waiting for the
// state store. Each of those is bounded by a count (max_queue_size, 0 by default:
// unbounded; sequence_backlog_limit, 1024), which says nothing of size: one client
// filling a model's sequence slots with tiny sessions could park a thousand 64 MiB STARTs
// in its backlog.
//
// A request holds its input bytes here from when it is queued until it is handed to a
// model instance or answered, whichever comes first (PendingRequest gives them back, once,
// on either); a request moved to a reloaded version keeps what it holds. One that would
// take the total past the budget is refused before it is queued, as a full queue refuses
// it: UNAVAILABLE (503) with Retry-After. The count is an add and a compare per request.

export class QueueBudget {
  readonly maxBytes: number;
  readonly #refusals: Refusals | undefined;
  #heldBytes = 0;

  constructor(maxBytes: number, refusals?: Refusals) {
    this.maxBytes = maxBytes;
    this.#refusals = refusals;
  }

  /** Bytes of the requests queued and not yet running, over every model. */
  get heldBytes(): number {
    return this.#heldBytes;
  }

  /**
   * Counts `bytes` of a request of `model` about to be queued; throws UNAVAILABLE, and
   * counts nothing, when they would take the total past the budget.
   */
  take(bytes: number, model: string, requestId: string): void {
    if (this.#heldBytes + bytes > this.maxBytes) {
      this.#refusals?.refused("queued_request_bytes");
      throw new ServerError(
        "UNAVAILABLE",
        `${requestLabel(requestId)}model '${model}' cannot queue the request: its ${bytes} bytes of inputs would take the requests waiting to run past the server's limit of ${this.maxBytes} bytes (--max-queued-request-bytes, for every model's queues together); retry later`,
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
 * What a request's inputs count in the budget: their data, and for BYTES each element's
 * 4-byte length prefix too, as the wire carries them (a tensor of empty strings is not free
 * to hold).
 */
export function queuedBytesOf(inputs: ReadonlyMap<string, Tensor>): number {
  let bytes = 0;
  for (const tensor of inputs.values()) {
    bytes += tensorByteLength(tensor);
    if (tensor.datatype === "BYTES") bytes += 4 * (tensor.data as BytesElements).length;
  }
  return bytes;
}
