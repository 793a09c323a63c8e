import { Counter, Histogram, type Registry, Summary } from "prom-client";
import type { MetricsSettings } from "../config/metrics-config.ts";
import type { ErrorCode } from "../core/errors.ts";
import type { RequestObserver, RequestRecord } from "../core/scheduler/request-observer.ts";
import { SeriesHolders } from "./series-holders.ts";

// The metrics kept per request as it is answered: latency histograms (for percentiles in
// Prometheus and Grafana), Triton's latency summaries when asked for, and Triton's failure
// counter by reason. Each model version gets its labelled children once, at load, so a
// request costs a few bucket increments and no label lookups. They go when the version
// does (series-holders.ts): the repository API could otherwise load models under any
// number of names, each leaving its series behind.

type Labels = "model" | "version";

/** Triton's failure reasons (nv_inference_request_failure{reason}). */
const FAILURE_REASONS = ["REJECTED", "CANCELED", "BACKEND", "OTHER"] as const;
type FailureReason = (typeof FAILURE_REASONS)[number];

/**
 * Triton's reason for a failure: turned away by the scheduler, cancelled, failed in the
 * model (any failure of a request that went to an instance, but its cancellation), or else.
 */
function failureReason(code: ErrorCode, dispatched = false): FailureReason {
  if (dispatched && code !== "CANCELLED") return "BACKEND";
  switch (code) {
    case "UNAVAILABLE":
    case "RESOURCE_EXHAUSTED":
      return "REJECTED";
    case "CANCELLED":
      return "CANCELED";
    case "INTERNAL":
      return "BACKEND";
    default:
      return "OTHER";
  }
}

/** Seconds, from 100 µs to 10 s: a batch step of a small model up to a long queue wait. */
const SECONDS_BUCKETS = [
  0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10,
];
/** Triton's buckets for nv_inference_first_response_histogram_ms. */
const FIRST_RESPONSE_BUCKETS_MS = [100, 500, 2000, 5000];

interface Observe {
  observe(value: number): void;
}

/** Builds a request observer for each model version, registering the families in `registry`. */
export function latencyMetrics(
  registry: Registry,
  settings: MetricsSettings,
): (model: string, version: string) => RequestObserver {
  const registers = [registry];
  const labelNames: Labels[] = ["model", "version"];
  const failures = new Counter<Labels | "reason">({
    name: "nv_inference_request_failure",
    help: "Number of failed inference requests, all batch sizes",
    labelNames: ["model", "version", "reason"],
    registers,
  });
  const histogram = (name: string, help: string, buckets: number[]) =>
    new Histogram<Labels>({ name, help, labelNames, buckets, registers });
  const histograms = settings.histogramLatencies
    ? {
        firstResponse: histogram(
          "nv_inference_first_response_histogram_ms",
          "Duration from request to first response in milliseconds",
          FIRST_RESPONSE_BUCKETS_MS,
        ),
        request: histogram(
          "seqserve_inference_request_duration_seconds",
          "Inference request duration from arrival at the model to its answer, successful requests",
          SECONDS_BUCKETS,
        ),
        queue: histogram(
          "seqserve_inference_queue_duration_seconds",
          "Time requests waited before their batch was handed to a model instance",
          SECONDS_BUCKETS,
        ),
        compute: histogram(
          "seqserve_inference_compute_duration_seconds",
          "Time of the model execution a request ran in (input, inference and output)",
          SECONDS_BUCKETS,
        ),
      }
    : undefined;
  const summary = (name: string, help: string) =>
    new Summary<Labels>({
      name,
      help,
      labelNames,
      percentiles: settings.summaryQuantiles.map((q) => q.quantile),
      // A sliding window, as Triton's summaries: quantiles of the last minute.
      maxAgeSeconds: 60,
      ageBuckets: 5,
      registers,
    });
  const summaries = settings.summaryLatencies
    ? {
        request: summary(
          "nv_inference_request_summary_us",
          "Summary of inference request duration in microseconds (includes cached requests)",
        ),
        queue: summary(
          "nv_inference_queue_summary_us",
          "Summary of inference queuing duration in microseconds (includes cached requests)",
        ),
        input: summary(
          "nv_inference_compute_input_summary_us",
          "Cumulative compute input duration in microseconds (does not include cached requests)",
        ),
        infer: summary(
          "nv_inference_compute_infer_summary_us",
          "Cumulative compute inference duration in microseconds (does not include cached requests)",
        ),
        output: summary(
          "nv_inference_compute_output_summary_us",
          "Cumulative inference compute output duration in microseconds (does not include cached requests)",
        ),
      }
    : undefined;

  const holders = new SeriesHolders();
  const removeSeries = (labels: Record<Labels, string>): void => {
    for (const reason of FAILURE_REASONS) failures.remove({ ...labels, reason });
    for (const family of [...Object.values(histograms ?? {}), ...Object.values(summaries ?? {})])
      family.remove(labels);
  };

  return (model, version) => {
    const labels = { model, version };
    const key = JSON.stringify(labels);
    holders.hold(key);
    const failed = {} as Record<FailureReason, Counter.Internal>;
    for (const reason of FAILURE_REASONS) {
      failed[reason] = failures.labels({ ...labels, reason });
      failed[reason].inc(0);
    }
    // At 0 from the load, as Triton's (a series that appears with the first request leaves
    // an idle model out of a dashboard's sums and sets off `absent()` alerts).
    for (const family of Object.values(histograms ?? {})) family.zero(labels);
    const hist = histograms && {
      firstResponse: histograms.firstResponse.labels(labels),
      request: histograms.request.labels(labels),
      queue: histograms.queue.labels(labels),
      compute: histograms.compute.labels(labels),
    };
    const sum = summaries && {
      request: summaries.request.labels(labels) as Observe,
      queue: summaries.queue.labels(labels) as Observe,
      input: summaries.input.labels(labels) as Observe,
      infer: summaries.infer.labels(labels) as Observe,
      output: summaries.output.labels(labels) as Observe,
    };
    return {
      requestDone(record: RequestRecord): void {
        const { timings, error } = record;
        if (error !== undefined) {
          // Counted as the statistics count failures (which Triton keeps in one place).
          if (record.refused === true) return;
          failed[failureReason(error.code, record.dispatched)].inc();
          // Its first response went out, an error itself at the latest: Triton times the
          // first response of any kind.
          hist?.firstResponse.observe((record.firstResponseNs ?? record.totalNs) / 1e6);
          return;
        }
        if (timings === undefined) return;
        // Answered without a run (see ModelStatistics.recordSuccess): no compute to time.
        const ran = timings.batchSize > 0;
        if (hist !== undefined) {
          // A decoupled request that completed without a response had no first response
          // (Triton observes it as a response is sent, never for the final flag alone).
          if (record.firstResponseNs !== undefined || record.streamed !== true)
            hist.firstResponse.observe((record.firstResponseNs ?? timings.totalNs) / 1e6);
          hist.request.observe(timings.totalNs / 1e9);
          hist.queue.observe(timings.queueNs / 1e9);
          if (ran)
            hist.compute.observe(
              (timings.computeInputNs + timings.computeInferNs + timings.computeOutputNs) / 1e9,
            );
        }
        if (sum !== undefined) {
          sum.request.observe(timings.totalNs / 1e3);
          sum.queue.observe(timings.queueNs / 1e3);
          if (ran) {
            sum.input.observe(timings.computeInputNs / 1e3);
            sum.infer.observe(timings.computeInferNs / 1e3);
            sum.output.observe(timings.computeOutputNs / 1e3);
          }
        }
      },
      close(): void {
        if (holders.release(key)) removeSeries(labels);
      },
    };
  };
}
