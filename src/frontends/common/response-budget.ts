import type { Refusals } from "../../core/refusals.ts";

// One byte budget per client connection for the answers its streams have waiting to be
// sent (gRPC ModelStreamInfer calls, a WebSocket, Server-Sent Events): what a client that
// stops reading can make the server hold. A count of messages is no bound when one answer
// may be megabytes, so every encoded answer is counted from the moment it exists (held
// for its turn, or written and not yet flushed to the socket) until the transport has
// taken it.
//
// At half the budget, streams stop starting new requests (and stop reading) until
// answers drain; requests already running still finish, and an answer that would take
// the connection past the whole budget is not kept: the stream it belongs to ends
// (RESOURCE_EXHAUSTED, WebSocket 1008), its sequences with it. A client that reads its
// answers never comes near it.
//
// Connections together have a budget too (--max-buffered-response-bytes-total): without
// it, clients that read nothing could make the server hold the per-connection budget
// times the connections allowed. Past half of it, connections holding answers stop
// reading; an answer that would take the total past it is not kept, unless its
// connection holds none (a client that reads is not ended for others' unread answers).

export class ConnectionBudget {
  readonly #budgets: ResponseBudgets;
  readonly #key: unknown;
  #used = 0;
  #users = 1;
  /** Every stream has released it: late callbacks (a socket's failed writes) change nothing. */
  #released = false;
  readonly #waiters = new Set<() => void>();

  constructor(budgets: ResponseBudgets, key: unknown) {
    this.#budgets = budgets;
    this.#key = key;
  }

  get limitBytes(): number {
    return this.#budgets.limitBytes;
  }

  /** Which budget the last refused answer would have passed, in words for the client and the log. */
  get refusal(): string {
    return this.#refusal;
  }
  #refusal = "";

  /** Bytes of answers held for the connection. */
  get usedBytes(): number {
    return this.#used;
  }

  /** Streams should start nothing new (and read nothing more) until answers drain. */
  get saturated(): boolean {
    return this.#used * 2 >= this.#budgets.limitBytes || (this.#used > 0 && this.#budgets.totalSaturated);
  }

  /**
   * Counts an answer of `bytes`; false (and nothing counted) when it would take the
   * connection past its budget: the caller drops the answer and ends its stream.
   */
  take(bytes: number): boolean {
    if (this.#released) return true;
    if (this.#used + bytes > this.#budgets.limitBytes && this.#used > 0) {
      this.#budgets.refusals?.refused("buffered_response_bytes");
      this.#refusal = `more than ${this.#budgets.limitBytes} bytes wait to be sent on this connection (--max-buffered-response-bytes)`;
      return false;
    }
    if (this.#budgets.totalBytes + bytes > this.#budgets.totalLimitBytes && this.#used > 0) {
      this.#budgets.refusals?.refused("buffered_response_bytes_total");
      this.#refusal = `more than ${this.#budgets.totalLimitBytes} bytes of answers wait to be sent over all connections, this one's among them (--max-buffered-response-bytes-total)`;
      return false;
    }
    this.#used += bytes;
    this.#budgets.adjust(bytes);
    return true;
  }

  /** `bytes` of answers have been taken by the transport (or dropped). */
  give(bytes: number): void {
    if (this.#released) return;
    const wasSaturated = this.saturated;
    this.#used -= bytes;
    this.#budgets.adjust(-bytes);
    if (wasSaturated && !this.saturated) this.wake();
  }

  /** Tells the streams waiting for room that there is some. */
  wake(): void {
    for (const waiter of [...this.#waiters]) waiter();
  }

  /** `listener` runs each time the connection stops being saturated. */
  onRoom(listener: () => void): () => void {
    this.#waiters.add(listener);
    return () => this.#waiters.delete(listener);
  }

  /** One more stream uses the budget. */
  share(): this {
    this.#users++;
    return this;
  }

  /**
   * A stream is done with the budget. When the last one is, what the connection still
   * held (answers a closed socket never took) is given back.
   */
  release(): void {
    if (--this.#users > 0) return;
    this.#released = true;
    this.#budgets.adjust(-this.#used);
    this.#used = 0;
    this.#budgets.forget(this.#key);
  }
}

/** The budgets of a server's connections, and their total (bounded, and for the metrics). */
export class ResponseBudgets {
  readonly limitBytes: number;
  readonly totalLimitBytes: number;
  readonly refusals: Refusals | undefined;
  readonly #connections = new Map<unknown, ConnectionBudget>();
  #total = 0;
  #peak = 0;

  constructor(limitBytes: number, totalLimitBytes = Number.POSITIVE_INFINITY, refusals?: Refusals) {
    this.limitBytes = limitBytes;
    this.totalLimitBytes = totalLimitBytes;
    this.refusals = refusals;
  }

  /** Connections holding answers should start nothing new until the total drains below half. */
  get totalSaturated(): boolean {
    return this.#total * 2 >= this.totalLimitBytes;
  }

  /**
   * The budget of the connection `key` names (a socket, or a gRPC peer address), shared
   * by its streams; each stream releases it when it ends.
   */
  acquire(key: unknown): ConnectionBudget {
    const existing = this.#connections.get(key);
    if (existing !== undefined) return existing.share();
    const budget = new ConnectionBudget(this, key);
    this.#connections.set(key, budget);
    return budget;
  }

  /** Whether the connection `key` names holds half its budget or more (without taking a share of it). */
  saturated(key: unknown): boolean {
    return this.#connections.get(key)?.saturated ?? false;
  }

  /** Bytes of answers held over every connection. */
  get totalBytes(): number {
    return this.#total;
  }

  /** The most bytes of answers held at once since the server started. */
  get peakBytes(): number {
    return this.#peak;
  }

  adjust(bytes: number): void {
    const wasSaturated = this.totalSaturated;
    this.#total += bytes;
    if (this.#total > this.#peak) this.#peak = this.#total;
    // Below half again: every connection the total held back may read again.
    if (wasSaturated && !this.totalSaturated) {
      for (const budget of this.#connections.values()) if (!budget.saturated) budget.wake();
    }
  }

  forget(key: unknown): void {
    this.#connections.delete(key);
  }
}
