import type { SequenceLoggingConfig } from "../core/model-config.ts";
import type { BatchEvent, BatchObserver } from "../core/scheduler/batch-observer.ts";
import { formatSequenceId } from "../core/sequence/sequence-parameters.ts";
import type { Logger } from "./logger.ts";

// The ONNX stateful backend's model-runner log, for users who read it: state resets, one
// line per batch, and every `metric_logging_frequency_seconds` the average and maximum
// batch size (with the queue and compute split when detailed metrics are asked for).
// Like the backend, it reports when a batch runs; an idle model writes nothing.

export function modelRunnerLog(
  modelName: string,
  settings: SequenceLoggingConfig,
  logger: Logger,
): BatchObserver | undefined {
  const { resets, batches, metricsIntervalSecs, detailedMetrics } = settings;
  if (!resets && !batches && metricsIntervalSecs === 0) return undefined;
  const log = logger.child({ model: modelName });
  // The period starts with its first batch, so an idle spell is not reported as a period.
  let windowStartMs: number | undefined;
  let calls = 0;
  let requests = 0;
  let maxBatch = 0;
  let queueNs = 0;
  let computeNs = 0;
  return {
    batchRan(event: BatchEvent): void {
      if (resets && event.resets.length > 0) {
        log.info(
          { event: "sequence_reset", instance: event.instance },
          `resetting state for sequence${event.resets.length > 1 ? "s" : ""} ${event.resets.map(formatSequenceId).join(", ")}`,
        );
      }
      if (batches) {
        log.info(
          { event: "batch", instance: event.instance, rows: event.rows, executed_rows: event.executedRows },
          `running inference of ${event.rows} requests on instance ${event.instance}`,
        );
      }
      if (metricsIntervalSecs === 0) return;
      calls++;
      requests += event.rows;
      maxBatch = Math.max(maxBatch, event.rows);
      queueNs += event.queueNs;
      computeNs += event.computeNs;
      const now = Date.now();
      windowStartMs ??= now;
      if (now - windowStartMs < metricsIntervalSecs * 1000) return;
      const fields: Record<string, unknown> = {
        event: "batch_metrics",
        inference_calls: calls,
        requests,
        average_batch_size: requests / calls,
        max_batch_size: maxBatch,
      };
      if (detailedMetrics) {
        fields.queue_ms = queueNs / 1e6;
        fields.compute_ms = computeNs / 1e6;
      }
      log.info(fields, `Average Batch Size: ${(requests / calls).toFixed(2)}, Max Batch Size: ${maxBatch}`);
      windowStartMs = undefined;
      calls = requests = maxBatch = queueNs = computeNs = 0;
    },
  };
}
