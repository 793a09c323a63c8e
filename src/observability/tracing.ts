import type { SpanExporter } from "@opentelemetry/sdk-trace-base";
import type { TraceSettings } from "../config/trace-config.ts";
import type { Logger } from "./logger.ts";
import { TraceManager } from "./trace-manager.ts";
import { tritonTraceFile } from "./triton-trace-file.ts";

// Request tracing as the launch settings ask, changeable while the server runs (Triton's
// trace extension): OpenTelemetry spans (mode opentelemetry), or Triton's JSON trace
// file (mode triton, when a file is given).

/**
 * The server's trace manager. `exporter` replaces the OTLP exporter (and means mode
 * opentelemetry). OpenTelemetry's packages are loaded only once a setting traces: a
 * server that does not trace does not hold them in memory.
 */
export function createTracing(
  settings: TraceSettings,
  serverVersion: string,
  logger: Logger,
  exporter?: SpanExporter,
): Promise<TraceManager> {
  const mode = exporter === undefined ? settings.mode : "opentelemetry";
  const file = settings.file;
  // Each kind of failure once: with a log frequency, a full disk fails every new file, and
  // would be reported at every trace (a set of the files would grow as long).
  const reported = new Set<string>();
  const onFileError = (path: string, error: Error) => {
    const kind = (error as NodeJS.ErrnoException).code ?? "write failed";
    if (reported.has(kind)) return;
    reported.add(kind);
    logger.error(
      { event: "trace_file_error", file: path },
      `failed creating trace file '${path}': ${kind}; its traces are dropped (later failures of this kind are not logged)`,
    );
  };
  return TraceManager.create(settings, mode, async () => {
    if (mode === "opentelemetry") {
      return (await import("./otel-tracing.ts")).otelTracing(settings, serverVersion, exporter);
    }
    return file === undefined ? undefined : tritonTraceFile(file, onFileError);
  });
}
