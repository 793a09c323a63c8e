import { Counter, Histogram, type Registry } from "prom-client";
import type {
  StateStoreFailureKind,
  StateStoreObserver,
  StateStoreOperation,
} from "../state-tiers/state-store-observer.ts";

// The shared state store's own series (--state-store): how long its requests take, and
// which fail and why. What the store did for each model (sequences read from it, write
// conflicts, hand-overs, failed writes) is read from the models at scrape time, with the
// other sequence series (metrics.ts).

/** Store requests are a Redis round trip: from 0.1 ms to a command timeout. */
const BUCKETS_SECONDS = [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 10];

export function stateStoreMetrics(registry: Registry): StateStoreObserver {
  const duration = new Histogram<"operation">({
    name: "seqserve_state_store_request_duration_seconds",
    help: "Requests to the shared state store (read, write, renew, move, reserve_ids), answered or failed, in seconds",
    labelNames: ["operation"],
    buckets: BUCKETS_SECONDS,
    registers: [registry],
  });
  const failures = new Counter<"operation" | "kind">({
    name: "seqserve_state_store_failures_total",
    help: "Requests to the shared state store that failed, by operation and kind (full, unreachable, timeout, closed, refused)",
    labelNames: ["operation", "kind"],
    registers: [registry],
  });
  return {
    answered: (operation: StateStoreOperation, seconds: number) => duration.observe({ operation }, seconds),
    failed: (operation: StateStoreOperation, kind: StateStoreFailureKind, _said: string, seconds: number) => {
      duration.observe({ operation }, seconds);
      failures.inc({ operation, kind });
    },
    connectionFailed: () => {},
    connected: () => {},
  };
}
