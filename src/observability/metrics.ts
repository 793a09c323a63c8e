import { type Counter, collectDefaultMetrics, Gauge, Counter as PromCounter, Registry } from "prom-client";
import type { MetricsSettings } from "../config/metrics-config.ts";
import type { OvmsMetricsSettings } from "../config/ovms-metrics-config.ts";
import type { ApiCallRecorder } from "../core/api-calls.ts";
import {
  type ModelRegistry,
  SEQUENCE_END_REASONS,
  type SequenceSummary,
  type SequenceTierSummary,
  type ServedModel,
} from "../core/model.ts";
import type { RequestObserverFactory } from "../core/scheduler/request-observer.ts";
import { type CounterTotals, counterTotals } from "../core/statistics.ts";
import type { StateStoreObserver } from "../state-tiers/state-store-observer.ts";
import { cpuMetrics } from "./cpu-metrics.ts";
import { latencyMetrics } from "./latency-metrics.ts";
import { ovmsMetrics } from "./ovms-metrics.ts";
import { pinnedMemoryMetrics } from "./pinned-memory-metrics.ts";
import { registerSecurityMetrics, type SecurityMetricsSource } from "./security-metrics.ts";
import { stateStoreMetrics } from "./state-store-metrics.ts";

// Prometheus metrics, named as Triton names them (nv_inference_*, nv_cpu_*) so existing
// dashboards work, plus seqserve's sequence metrics and latency histograms, and Node's
// process metrics under their usual names. Counts and cumulative durations are read at
// scrape time from the models' statistics and sequence summaries (one source of truth);
// what needs each request's own values (histograms, summaries, failures by reason) is
// kept by a request observer per model version (latency-metrics.ts).

type Labels = "model" | "version";

function cumulative(
  registry: Registry,
  name: string,
  help: string,
  read: (registry: ModelRegistry) => Iterable<[Record<Labels, string>, number]>,
  models: ModelRegistry,
): void {
  new PromCounter<Labels>({
    name,
    help,
    labelNames: ["model", "version"],
    registers: [registry],
    collect(this: Counter<Labels>) {
      this.reset();
      for (const [labels, value] of read(models)) this.inc(labels, value);
    },
  });
}

export interface ServerMetrics {
  readonly registry: Registry;
  /** Where frontends record their calls, when OVMS's families are served. */
  readonly apiCalls?: ApiCallRecorder;
  /** The observers a model version reports its requests to (models load after this exists). */
  readonly observers: readonly RequestObserverFactory[];
  /** Publishes what is read from the models at scrape time. */
  watchModels(models: ModelRegistry): void;
  /** The shared state store's series (with --state-store): what the store is to tell. */
  observeStateStore(): StateStoreObserver;
  /** Stops the sampling timers. */
  close(): void;
}

/**
 * `security`: what limits and access control refused, read at scrape time; `ovms`: OpenVINO
 * Model Server's families, served too when set.
 */
export function createMetricsRegistry(
  settings: MetricsSettings,
  security?: SecurityMetricsSource,
  ovms?: OvmsMetricsSettings,
): ServerMetrics {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry });
  if (security !== undefined) registerSecurityMetrics(registry, security);
  const cpu = settings.cpuMetrics ? cpuMetrics(registry, settings.intervalMs) : undefined;
  pinnedMemoryMetrics(registry);
  const latency = latencyMetrics(registry, settings);
  const ovmsFamilies = ovms === undefined ? undefined : ovmsMetrics(registry, ovms);
  return {
    registry,
    ...(ovmsFamilies === undefined ? {} : { apiCalls: ovmsFamilies.apiCalls }),
    observers: ovmsFamilies === undefined ? [latency] : [latency, ovmsFamilies.observeRequests],
    watchModels: (models) => {
      modelMetrics(registry, models, settings);
      ovmsFamilies?.watchModels(models);
    },
    observeStateStore: () => stateStoreMetrics(registry),
    close: () => cpu?.close(),
  };
}

/** The families read from the models' statistics and sequence summaries at scrape time. */
function modelMetrics(registry: Registry, models: ModelRegistry, settings: MetricsSettings): void {
  // A version loaded again in its place counts on from the load it replaced.
  const totalsOf = (m: ServedModel): CounterTotals => m.counterTotals?.() ?? counterTotals(m.statistics());
  const fromStats = (pick: (totals: CounterTotals) => number) =>
    function* (models: ModelRegistry): Iterable<[Record<Labels, string>, number]> {
      for (const m of models.served()) yield [{ model: m.name, version: m.version }, pick(totalsOf(m))];
    };
  const us = (ns: number): number => Math.round(ns / 1000);

  cumulative(
    registry,
    "nv_inference_request_success",
    "Number of successful inference requests, all batch sizes",
    fromStats((t) => t.success),
    models,
  );
  cumulative(
    registry,
    "nv_inference_count",
    "Number of inferences performed (does not include cached requests)",
    fromStats((t) => t.inferences),
    models,
  );
  cumulative(
    registry,
    "nv_inference_exec_count",
    "Number of model executions performed (does not include cached requests)",
    fromStats((t) => t.executions),
    models,
  );
  if (settings.counterLatencies) {
    cumulative(
      registry,
      "nv_inference_request_duration_us",
      "Cumulative inference request duration in microseconds (includes cached requests)",
      // Triton adds a request's duration here only when it succeeds.
      fromStats((t) => us(t.successNs)),
      models,
    );
    cumulative(
      registry,
      "nv_inference_queue_duration_us",
      "Cumulative inference queuing duration in microseconds (includes cached requests)",
      fromStats((t) => us(t.queueNs)),
      models,
    );
    cumulative(
      registry,
      "nv_inference_compute_input_duration_us",
      "Cumulative compute input duration in microseconds (does not include cached requests)",
      fromStats((t) => us(t.computeInputNs)),
      models,
    );
    cumulative(
      registry,
      "nv_inference_compute_infer_duration_us",
      "Cumulative compute inference duration in microseconds (does not include cached requests)",
      fromStats((t) => us(t.computeInferNs)),
      models,
    );
    cumulative(
      registry,
      "nv_inference_compute_output_duration_us",
      "Cumulative inference compute output duration in microseconds (does not include cached requests)",
      fromStats((t) => us(t.computeOutputNs)),
      models,
    );
  }

  new PromCounter<Labels | "batch_size">({
    name: "seqserve_inference_exec_count_by_batch_size",
    help: "Model executions by batch size (padding rows of the Direct strategy included)",
    labelNames: ["model", "version", "batch_size"],
    registers: [registry],
    collect(this: Counter<Labels | "batch_size">) {
      this.reset();
      for (const m of models.served()) {
        for (const [size, executions] of totalsOf(m).batches) {
          this.inc({ model: m.name, version: m.version, batch_size: String(size) }, executions);
        }
      }
    },
  });

  /** A gauge with one series per served model version, its value read at each scrape (undefined: none). */
  const modelGauge = (name: string, help: string, value: (m: ServedModel) => number | undefined) =>
    new Gauge<Labels>({
      name,
      help,
      labelNames: ["model", "version"],
      registers: [registry],
      collect(this: Gauge<Labels>) {
        this.reset();
        for (const m of models.served()) {
          const v = value(m);
          if (v !== undefined) this.set({ model: m.name, version: m.version }, v);
        }
      },
    });
  modelGauge("nv_model_load_duration_secs", "Model load time in seconds", (m) => m.loadSeconds);
  // As Triton's: requests waiting for an instance, not those handed to one.
  modelGauge(
    "nv_inference_pending_request_count",
    "Instantaneous number of pending requests awaiting execution per-model.",
    (m) => m.pending - m.running,
  );
  const sequenceGauge = (name: string, help: string, pick: (s: SequenceSummary) => number) =>
    modelGauge(name, help, (m) => (m.sequences === undefined ? undefined : pick(m.sequences.summary())));
  sequenceGauge(
    "seqserve_sequences_live",
    "Sequences holding a slot (running, waiting for their next request, or ending)",
    (s) => s.live,
  );
  sequenceGauge("seqserve_sequence_backlog", "Sequences waiting for a free slot", (s) => s.backlog);
  sequenceGauge(
    "seqserve_sequence_state_bytes",
    "Bytes of implicit state kept for live sequences",
    (s) => s.stateBytes,
  );
  sequenceGauge(
    "seqserve_sequence_state_allocated_bytes",
    "Bytes of state memory reserved (slabs allocated ahead of sequences), held or not",
    (s) => s.stateAllocatedBytes,
  );

  /** A counter per served model version with a shared state store, read from its sequences' summary. */
  const tierCounter = (name: string, help: string, pick: (t: SequenceTierSummary) => number) =>
    cumulative(
      registry,
      name,
      help,
      function* (models: ModelRegistry): Iterable<[Record<Labels, string>, number]> {
        for (const m of models.served()) {
          const tier = m.sequences?.summary().tier;
          if (tier !== undefined) yield [{ model: m.name, version: m.version }, pick(tier)];
        }
      },
      models,
    );
  tierCounter(
    "seqserve_state_store_sequences_loaded_total",
    "Sequences this replica read from the shared state store because it did not hold them",
    (t) => t.loaded,
  );
  tierCounter(
    "seqserve_state_store_conflicts_total",
    "Writes to the shared state store that found the sequence advanced or ended by another replica",
    (t) => t.conflicts,
  );
  tierCounter(
    "seqserve_state_store_handed_over_total",
    "Sequences this replica let go of to go on on another replica",
    (t) => t.handedOver,
  );
  tierCounter(
    "seqserve_state_store_write_failures_total",
    "Writes of a step's state or of an end that the shared state store refused or failed",
    (t) => t.writeFailures,
  );

  new PromCounter<Labels | "reason">({
    name: "seqserve_sequences_ended_total",
    help: `Sequences ended, by reason (${SEQUENCE_END_REASONS.join(", ")})`,
    labelNames: ["model", "version", "reason"],
    registers: [registry],
    collect(this: Counter<Labels | "reason">) {
      this.reset();
      for (const m of models.served()) {
        if (m.sequences === undefined) continue;
        const ended = m.sequences.summary().ended;
        for (const reason of SEQUENCE_END_REASONS)
          this.inc({ model: m.name, version: m.version, reason }, ended[reason]);
      }
    },
  });
}
