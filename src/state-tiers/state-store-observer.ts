// What a state store tells those who watch it (the log and the metrics, composed in
// app/state-tier.ts): each request it answered or failed, with how long it took, and its
// connection's ups and downs. Failures come in the words clients are given (never the
// store client's own texts), with a kind to count them by.

/**
 * The store's requests, as counted: a record read (whole or its stamp), written (a step),
 * ended (an end, which a full store still takes), renewed or moved, or ids reserved.
 */
export type StateStoreOperation = "read" | "write" | "end" | "renew" | "move" | "reserve_ids";

/**
 * Why a request failed: the store is full (maxmemory), could not be reached, did not
 * answer in time, its connection is closed, or it refused the request otherwise.
 */
export type StateStoreFailureKind = "full" | "unreachable" | "timeout" | "closed" | "refused";

export interface StateStoreObserver {
  answered(operation: StateStoreOperation, seconds: number): void;
  failed(operation: StateStoreOperation, kind: StateStoreFailureKind, said: string, seconds: number): void;
  /** The connection failed (the client retries it): `message` says how. */
  connectionFailed(message: string): void;
  /** The connection is ready, the first time or again. */
  connected(): void;
}

/** One observer telling several. */
export function allOf(observers: readonly StateStoreObserver[]): StateStoreObserver {
  return {
    answered: (operation, seconds) => {
      for (const o of observers) o.answered(operation, seconds);
    },
    failed: (operation, kind, said, seconds) => {
      for (const o of observers) o.failed(operation, kind, said, seconds);
    },
    connectionFailed: (message) => {
      for (const o of observers) o.connectionFailed(message);
    },
    connected: () => {
      for (const o of observers) o.connected();
    },
  };
}
