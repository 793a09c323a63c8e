import type { PendingRequest } from "./pending-request.ts";

// Releases completions in the order their tickets were issued (Triton's
// `preserve_ordering`): a request that finishes early waits for those given tickets before it.

export class OrderedRelease {
  #next = 0;
  #issued = 0;
  readonly #ready = new Map<number, () => void>();

  /** The next place in the order. */
  issue(): number {
    return this.#issued++;
  }

  /** Every ticket issued has been released. */
  get settled(): boolean {
    return this.#next === this.#issued;
  }

  /** Runs `release` once every earlier ticket has been released. */
  complete(ticket: number, release: () => void): void {
    this.#ready.set(ticket, release);
    for (let run = this.#ready.get(this.#next); run !== undefined; run = this.#ready.get(this.#next)) {
      this.#ready.delete(this.#next++);
      run();
    }
  }
}

/**
 * Gives `request` the next place in `ordering`: its answer goes out once every earlier
 * place's has. A request that has a place keeps it.
 */
export function takePlace(ordering: OrderedRelease, request: PendingRequest): void {
  if (request.gated) return;
  const ticket = ordering.issue();
  request.deliverThrough((deliver) => ordering.complete(ticket, deliver));
}
