import { type Counter, Gauge, Counter as PromCounter, type Registry } from "prom-client";
import { LIMITS, type Refusals } from "../core/refusals.ts";

// What the limits and access control refused, the bytes of answers waiting for slow
// readers and those of requests waiting to run, read at scrape time like the rest of the
// metrics.

export interface SecurityMetricsSource {
  readonly refusals: Refusals;
  /** Bytes of answers waiting to be sent, over every connection. */
  bufferedResponseBytes(): number;
  /** The most such bytes held at once since the server started. */
  bufferedResponsePeakBytes(): number;
  /** Bytes of gRPC messages received in part, over every connection. */
  grpcPartialMessageBytes(): number;
  /** Input bytes of the STARTs queued and not yet running, over every model. */
  queuedStartBytes(): number;
}

export function registerSecurityMetrics(registry: Registry, source: SecurityMetricsSource): void {
  new PromCounter<"limit">({
    name: "seqserve_limit_refusals_total",
    help: `Requests, connections and loads refused by a limit (${LIMITS.join(", ")})`,
    labelNames: ["limit"],
    registers: [registry],
    collect(this: Counter<"limit">) {
      this.reset();
      for (const limit of LIMITS) this.inc({ limit }, source.refusals.count(limit));
    },
  });
  new PromCounter<"api" | "reason">({
    name: "seqserve_auth_refusals_total",
    help: "API calls refused by access control, by API group and reason (missing, invalid, forbidden)",
    labelNames: ["api", "reason"],
    registers: [registry],
    collect(this: Counter<"api" | "reason">) {
      this.reset();
      for (const { api, reason, count } of source.refusals.authCounts()) this.inc({ api, reason }, count);
    },
  });
  new Gauge({
    name: "seqserve_buffered_response_bytes",
    help: "Bytes of answers waiting to be sent to clients that read slowly (all connections)",
    registers: [registry],
    collect(this: Gauge) {
      this.set(source.bufferedResponseBytes());
    },
  });
  new Gauge({
    name: "seqserve_buffered_response_peak_bytes",
    help: "The most bytes of answers held at once for slow readers since the server started",
    registers: [registry],
    collect(this: Gauge) {
      this.set(source.bufferedResponsePeakBytes());
    },
  });
  new Gauge({
    name: "seqserve_grpc_partial_message_bytes",
    help: "Bytes of gRPC messages received in part, not yet whole (all connections)",
    registers: [registry],
    collect(this: Gauge) {
      this.set(source.grpcPartialMessageBytes());
    },
  });
  new Gauge({
    name: "seqserve_queued_start_bytes",
    help: "Input bytes of the STARTs queued and not yet running (every model's sequence backlogs and queues)",
    registers: [registry],
    collect(this: Gauge) {
      this.set(source.queuedStartBytes());
    },
  });
}
