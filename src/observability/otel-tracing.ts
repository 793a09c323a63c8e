import {
  type Attributes,
  type Context,
  type HrTime,
  ROOT_CONTEXT,
  SpanKind,
  SpanStatusCode,
  type TextMapGetter,
  type Tracer,
  trace,
} from "@opentelemetry/api";
import { W3CTraceContextPropagator } from "@opentelemetry/core";
import { OTLPTraceExporter } from "@opentelemetry/exporter-trace-otlp-http";
import { resourceFromAttributes } from "@opentelemetry/resources";
import { BasicTracerProvider, BatchSpanProcessor, type SpanExporter } from "@opentelemetry/sdk-trace-base";
import type { TraceSettings } from "../config/trace-config.ts";
import type { TraceCarrier } from "../core/infer.ts";
import type { RequestRecord } from "../core/scheduler/request-observer.ts";
import { formatSequenceId } from "../core/sequence/sequence-parameters.ts";
import { requestTimeline } from "./request-timeline.ts";
import type { TraceSink } from "./trace-manager.ts";

// Requests as OpenTelemetry spans, exported over OTLP/HTTP as Triton's opentelemetry mode
// does (Jaeger, Tempo and the OpenTelemetry Collector take them). A traced request is one
// span, "InferRequest", with Triton's timestamp events and attributes, the sequence id,
// and child spans for its time in the queue and in its batch, the batch's model
// execution ("compute") inside it. The spans are made when the request is answered, from
// the times its record carries (request-timeline.ts), so a request that is not traced
// costs nothing more than the sampler's counter (trace-setting.ts). A request that
// carries a W3C trace context joins that trace.

const ORIGIN_SECONDS = Math.floor(performance.timeOrigin / 1000);
const ORIGIN_NS = Math.round((performance.timeOrigin % 1000) * 1e6);

/**
 * A time on the `performance.now()` clock (in ns) as OpenTelemetry's [seconds, ns] since
 * the epoch. Every time is placed from the same origin, so a request's spans line up
 * exactly (OpenTelemetry's own conversion re-reads the wall clock for each span).
 */
function hrTime(ns: number): HrTime {
  const total = ORIGIN_NS + Math.round(ns);
  return [ORIGIN_SECONDS + Math.floor(total / 1e9), total % 1e9];
}

const carrierGetter: TextMapGetter<TraceCarrier> = {
  keys: (carrier) => Object.keys(carrier),
  get: (carrier, key) => (key === "traceparent" || key === "tracestate" ? carrier[key] : undefined),
};

/** Spans of the requests a setting picks; the spans carry timestamps only, as in Triton. */
export function otelTracing(
  settings: TraceSettings,
  serverVersion: string,
  exporter: SpanExporter = new OTLPTraceExporter({ url: settings.url }),
): TraceSink {
  const provider = new BasicTracerProvider({
    resource: resourceFromAttributes({ "service.version": serverVersion, ...settings.resource }),
    spanProcessors: [
      new BatchSpanProcessor(exporter, {
        maxQueueSize: settings.bspMaxQueueSize,
        scheduledDelayMillis: settings.bspScheduleDelayMs,
        maxExportBatchSize: settings.bspMaxExportBatchSize,
      }),
    ],
  });
  const tracer = provider.getTracer("seqserve", serverVersion);
  const propagator = new W3CTraceContextPropagator();
  return {
    record(_setting, model, version, record: RequestRecord): void {
      const parent =
        record.request.trace === undefined
          ? ROOT_CONTEXT
          : propagator.extract(ROOT_CONTEXT, record.request.trace, carrierGetter);
      requestSpans(tracer, parent, model, version, record);
    },
    retire(): void {},
    close: () => provider.shutdown(),
  };
}

function requestSpans(
  tracer: Tracer,
  parent: Context,
  model: string,
  version: string,
  record: RequestRecord,
): void {
  const { request, timings, error } = record;
  const startNs = record.arrivalNs;
  const endNs = startNs + record.totalNs;
  const attributes: Attributes = {
    "triton.model_name": model,
    "triton.model_version": version,
    "triton.request_id": request.id,
  };
  if (record.sequenceId !== undefined) {
    attributes["seqserve.sequence_id"] = formatSequenceId(record.sequenceId);
    attributes["seqserve.sequence_start"] = request.sequence?.start === true;
    attributes["seqserve.sequence_end"] = request.sequence?.end === true;
  }
  const root = tracer.startSpan(
    "InferRequest",
    { kind: SpanKind.SERVER, startTime: hrTime(startNs), attributes },
    parent,
  );
  root.addEvent("REQUEST_START", hrTime(startNs));
  root.addEvent("QUEUE_START", hrTime(startNs));
  if (error !== undefined) {
    root.setAttribute("seqserve.error_code", error.code);
    root.setStatus({ code: SpanStatusCode.ERROR, message: error.message });
  }
  const timeline = requestTimeline(record);
  if (timings !== undefined && timeline !== undefined) {
    const context = trace.setSpan(parent, root);
    const { dispatchNs, computeStartNs } = timeline;
    tracer.startSpan("queue", { startTime: hrTime(startNs) }, context).end(hrTime(dispatchNs));
    const sized = { "seqserve.batch_size": timings.batchSize };
    const batch = tracer.startSpan("batch", { startTime: hrTime(dispatchNs), attributes: sized }, context);
    const compute = tracer.startSpan(
      "compute",
      { startTime: hrTime(computeStartNs), attributes: sized },
      trace.setSpan(context, batch),
    );
    compute.addEvent("COMPUTE_START", hrTime(computeStartNs));
    compute.addEvent("COMPUTE_INPUT_END", hrTime(timeline.computeInputEndNs));
    compute.addEvent("COMPUTE_OUTPUT_START", hrTime(timeline.computeOutputStartNs));
    compute.addEvent("COMPUTE_END", hrTime(endNs));
    compute.end(hrTime(endNs));
    batch.end(hrTime(endNs));
    root.addEvent("COMPUTE_START", hrTime(computeStartNs));
    root.addEvent("COMPUTE_END", hrTime(endNs));
  }
  root.addEvent("REQUEST_END", hrTime(endNs));
  root.end(hrTime(endNs));
}
