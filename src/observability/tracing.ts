import type { SpanExporter } from "@opentelemetry/sdk-trace-base";
import { type TraceSettings, tracingOn } from "../config/trace-config.ts";
import type { ObserverFactory } from "./request-observers.ts";
import { TraceSampler } from "./trace-sampler.ts";
import { tritonTraceFile } from "./triton-trace-file.ts";

// Request tracing as the settings ask: OpenTelemetry spans (mode opentelemetry), or
// Triton's JSON trace file (mode triton with a file), or nothing.

export interface RequestTracing {
  readonly observeRequests: ObserverFactory;
  /** Sends or writes what is buffered. */
  close(): Promise<void>;
}

/**
 * undefined when nothing is traced. `exporter` replaces the OTLP exporter (and means mode
 * opentelemetry). OpenTelemetry's packages are loaded only when it traces: a server that
 * does not trace does not hold them in memory.
 */
export async function createTracing(
  settings: TraceSettings,
  serverVersion: string,
  exporter?: SpanExporter,
): Promise<RequestTracing | undefined> {
  const mode = exporter === undefined ? settings.mode : "opentelemetry";
  if (!tracingOn({ ...settings, mode })) return undefined;
  const sampler = new TraceSampler(settings);
  const tracing =
    mode === "opentelemetry"
      ? (await import("./otel-tracing.ts")).otelTracing(settings, sampler, serverVersion, exporter)
      : tritonTraceFile(settings, sampler);
  return {
    observeRequests: (model, version) => tracing.observeRequests(model, version),
    close: () => tracing.close(),
  };
}
