import { Counter, Gauge, Histogram, type Registry } from "prom-client";
import type { OvmsMetricsSettings } from "../config/ovms-metrics-config.ts";
import type { ApiCall, ApiCallRecorder } from "../core/api-calls.ts";
import type { ModelRegistry, ServedModel } from "../core/model.ts";
import { instanceCount } from "../core/model-config.ts";
import type { RequestObserver } from "../core/scheduler/request-observer.ts";
import { COUNTED_CALLS, type CountedCall } from "./ovms-counted-calls.ts";
import { SeriesHolders } from "./series-holders.ts";

// OpenVINO Model Server's metric families (model_metric_reporter.cpp), for OVMS users'
// dashboards and alerts: calls per API, method and transport, their processing time, the
// time in the model and in the queue, requests in process, and the parallel runs a model
// has (OpenVINO's streams; here its instances). Each model version has every series from
// the first scrape, at zero, as OVMS creates them when a version loads. Histograms are in
// microseconds, with OVMS's buckets.

/** OVMS's buckets: floor(10 × 1.8^i) µs, i = 0…32 (10 µs to about 1.5 hours). */
const BUCKETS = Array.from({ length: 33 }, (_, i) => Math.floor(10 * 1.8 ** i));

const TRANSPORTS = ["gRPC", "REST"] as const;
/** Every counted call: [api, method, how it is counted]. */
const COUNTED: readonly (readonly [string, string, CountedCall])[] = Object.entries(COUNTED_CALLS).flatMap(
  ([api, calls]) => Object.entries(calls).map(([method, call]) => [api, method, call] as const),
);

type CallLabels = "api" | "interface" | "method" | "name" | "version";
type ModelLabels = "name" | "version";

export interface OvmsMetrics {
  readonly apiCalls: ApiCallRecorder;
  /** The time in the model and in the queue of each request a model version answers. */
  observeRequests(model: string, version: string): RequestObserver | undefined;
  /** Publishes what is read from the models at scrape time. */
  watchModels(models: ModelRegistry): void;
}

export function ovmsMetrics(registry: Registry, settings: OvmsMetricsSettings): OvmsMetrics {
  const on = (family: string): boolean => settings.families.has(family);
  const registers = [registry];
  let models: ModelRegistry | undefined;
  const served = (): ServedModel[] => models?.served() ?? [];

  const callCounter = (name: string, help: string): Counter<CallLabels> | undefined =>
    on(name)
      ? new Counter<CallLabels>({
          name,
          help,
          labelNames: ["api", "interface", "method", "name", "version"],
          registers,
          collect(this: Counter<CallLabels>) {
            for (const model of served()) {
              for (const [api, method, { versioned }] of COUNTED) {
                for (const transport of TRANSPORTS) {
                  this.inc(
                    callLabels(api, transport, method, model.name, versioned ? model.version : undefined),
                    0,
                  );
                }
              }
            }
          },
        })
      : undefined;
  const success = callCounter("ovms_requests_success", "Number of successful requests to a model or a DAG.");
  const fail = callCounter("ovms_requests_fail", "Number of failed requests to a model or a DAG.");

  const histogram = <L extends string>(name: string, help: string, labelNames: L[]) =>
    on(name) ? new Histogram<L>({ name, help, labelNames, buckets: BUCKETS, registers }) : undefined;
  const requestTime = histogram("ovms_request_time_us", "Processing time of requests to a model or a DAG.", [
    "interface",
    "name",
    "version",
  ]);
  const inferenceTime = histogram(
    "ovms_inference_time_us",
    "Inference execution time in the OpenVINO backend.",
    ["name", "version"],
  );
  const waitTime = histogram(
    "ovms_wait_for_infer_req_time_us",
    "Request waiting time in the scheduling queue.",
    ["name", "version"],
  );
  /** A version's histogram series are made once (zero() would reset them) and shared. */
  const holders = new SeriesHolders();

  const gauge = (name: string, help: string, read: (m: ServedModel) => number): void => {
    if (!on(name)) return;
    new Gauge<ModelLabels>({
      name,
      help,
      labelNames: ["name", "version"],
      registers,
      collect(this: Gauge<ModelLabels>) {
        this.reset();
        for (const m of served()) this.set({ name: m.name, version: m.version }, read(m));
      },
    });
  };
  gauge("ovms_current_requests", "Number of inference requests currently in process.", (m) => m.pending);
  // OVMS counts the requests holding one of a model's inference requests (nireq); here,
  // those handed to one of its instances.
  gauge(
    "ovms_infer_req_active",
    "Number of currently consumed inference request from the processing queue.",
    (m) => m.running,
  );
  // OpenVINO's execution streams run a model's requests in parallel; here its instances do.
  gauge("ovms_streams", "Number of OpenVINO execution streams.", (m) => instanceCount(m.config));
  gauge("ovms_infer_req_queue_size", "Inference request queue size (nireq).", (m) => instanceCount(m.config));

  return {
    apiCalls: {
      record(call: ApiCall): void {
        const labels = callLabels(call.api, call.transport, call.method, call.model, call.version);
        (call.ok ? success : fail)?.inc(labels);
        // As in OVMS, only answered calls are timed.
        if (call.ok && call.durationUs !== undefined && call.version !== undefined) {
          requestTime?.observe(
            { interface: call.transport, name: call.model, version: call.version },
            call.durationUs,
          );
        }
      },
    },
    observeRequests(model, version) {
      // A version's histogram series exist from its load, at zero, as OVMS creates them.
      const labels = { name: model, version };
      const key = JSON.stringify(labels);
      if (requestTime === undefined && inferenceTime === undefined && waitTime === undefined)
        return undefined;
      if (holders.hold(key)) {
        for (const transport of TRANSPORTS) requestTime?.zero({ interface: transport, ...labels });
        inferenceTime?.zero(labels);
        waitTime?.zero(labels);
      }
      const inference = inferenceTime?.labels(labels);
      const wait = waitTime?.labels(labels);
      return {
        requestDone(record) {
          const timings = record.timings;
          // An END or a replayed step answered without a run is not timed, as in OVMS.
          if (timings === undefined || timings.batchSize === 0) return;
          inference?.observe(timings.computeInferNs / 1000);
          wait?.observe(timings.queueNs / 1000);
        },
        close() {
          if (!holders.release(key)) return;
          for (const transport of TRANSPORTS) requestTime?.remove({ interface: transport, ...labels });
          inferenceTime?.remove(labels);
          waitTime?.remove(labels);
        },
      };
    },
    watchModels(registryOfModels) {
      models = registryOfModels;
    },
  };
}

function callLabels(
  api: string,
  transport: string,
  method: string,
  name: string,
  version: string | undefined,
): Partial<Record<CallLabels, string>> {
  const labels: Partial<Record<CallLabels, string>> = { api, interface: transport, method, name };
  if (version !== undefined) labels.version = version;
  return labels;
}
