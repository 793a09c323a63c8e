import type {
  StateStoreFailureKind,
  StateStoreObserver,
  StateStoreOperation,
} from "../state-tiers/state-store-observer.ts";
import type { Logger } from "./logger.ts";

// The state store's troubles in the log, for operators: a store that refuses or fails
// requests (a full Redis, one that does not answer) is logged at its first failure, then
// summed up once an interval while it goes on (a full store fails every step: a line for
// each would flood the log), and a line says when it answers again. The connection's
// errors (the client retries them) are logged once each, and its return once.

/** How often failures that go on are summed up. */
const FAILURE_SUMMARY_INTERVAL_MS = 10_000;

/** How long without a failure before an answer says the store answers again. */
const RECOVERY_QUIET_MS = 1000;

export class StateStoreLog implements StateStoreObserver {
  readonly #logger: Logger;
  readonly #location: string;
  readonly #intervalMs: number;
  /** Since when requests fail (epoch ms), while they do. */
  #failingSinceMs: number | undefined;
  /**
   * The operations that failed: the store answers again when one of them does (a full
   * Redis refuses writes and still answers reads, which say nothing of its writes).
   */
  readonly #failing = new Set<StateStoreOperation>();
  /** When a request last failed (epoch ms). */
  #lastFailureMs = 0;
  /** Failures since the first one: in all, and since the last line, by operation and kind. */
  #failures = 0;
  #unsaid = new Map<string, number>();
  #lastSaid = "";
  #summaryTimer: NodeJS.Timeout | undefined;
  /** The connection's last error, while it has one. */
  #connectionError: string | undefined;

  constructor(logger: Logger, location: string, intervalMs = FAILURE_SUMMARY_INTERVAL_MS) {
    this.#logger = logger;
    this.#location = location;
    this.#intervalMs = intervalMs;
  }

  answered(operation: StateStoreOperation): void {
    if (this.#failingSinceMs === undefined || !this.#failing.has(operation)) return;
    // A store at its limit takes a write now and then (an end freed room) while it refuses
    // the rest: only an answer after a quiet while says it answers again.
    if (Date.now() - this.#lastFailureMs < RECOVERY_QUIET_MS) return;
    this.#summarise();
    this.#logger.info(
      {
        event: "state_store_recovered",
        state_store: this.#location,
        failures: this.#failures,
        since: new Date(this.#failingSinceMs).toISOString(),
      },
      `the state store at ${this.#location} answers again: ${this.#failures} request(s) failed since ${new Date(this.#failingSinceMs).toISOString()}`,
    );
    clearInterval(this.#summaryTimer);
    this.#summaryTimer = undefined;
    this.#failingSinceMs = undefined;
    this.#failing.clear();
    this.#failures = 0;
  }

  failed(operation: StateStoreOperation, kind: StateStoreFailureKind, said: string): void {
    this.#failures++;
    this.#lastFailureMs = Date.now();
    this.#failing.add(operation);
    this.#lastSaid = said;
    if (this.#failingSinceMs !== undefined) {
      const key = `${operation} (${kind})`;
      this.#unsaid.set(key, (this.#unsaid.get(key) ?? 0) + 1);
      return;
    }
    this.#failingSinceMs = Date.now();
    this.#logger.warn(
      { event: "state_store_failing", state_store: this.#location, operation, kind },
      `the state store at ${this.#location} fails requests: a ${operation} failed (${said}); further failures are summed up every ${this.#intervalMs / 1000} s until it answers again`,
    );
    // Unreferenced: a store failing while the server stops does not hold its exit.
    this.#summaryTimer = setInterval(() => this.#summarise(), this.#intervalMs);
    this.#summaryTimer.unref();
  }

  /** The failures since the last line, if any, in one line. */
  #summarise(): void {
    if (this.#unsaid.size === 0) return;
    const counts = Object.fromEntries(this.#unsaid);
    const total = [...this.#unsaid.values()].reduce((a, b) => a + b, 0);
    this.#unsaid = new Map();
    this.#logger.warn(
      { event: "state_store_failures", state_store: this.#location, failures: counts },
      `the state store at ${this.#location} failed ${total} more request(s): ${Object.entries(counts)
        .map(([what, n]) => `${n} ${what}`)
        .join(", ")}; the last: ${this.#lastSaid}`,
    );
  }

  connectionFailed(message: string): void {
    // The client repeats a connection error at each retry: each new one is logged once.
    if (message === this.#connectionError) return;
    this.#connectionError = message;
    this.#logger.warn(
      { event: "state_store_error", state_store: this.#location },
      `state store at ${this.#location}: ${message}`,
    );
  }

  connected(): void {
    if (this.#connectionError === undefined) return;
    this.#connectionError = undefined;
    this.#logger.info(
      { event: "state_store_connected", state_store: this.#location },
      `the state store at ${this.#location} is connected again`,
    );
  }
}
