import type { ModelStatisticsSnapshot } from "../core/statistics.ts";

// What the server says about a run: its statistics API read before and after, so the
// difference covers the run alone (warm-up included: batches are not timestamped).

export interface ServerSide {
  /** Executions by batch size. */
  readonly batches: Map<number, number>;
  readonly meanBatch: number;
  /** Per successful request, ms. */
  readonly queueMs: number;
  readonly computeMs: number;
}

export async function readStatistics(
  httpBase: string,
  model: string,
): Promise<ModelStatisticsSnapshot | undefined> {
  try {
    const response = await fetch(`${httpBase}/v2/models/${encodeURIComponent(model)}/stats`);
    if (!response.ok) return undefined;
    const body = (await response.json()) as { model_stats: ModelStatisticsSnapshot[] };
    // The highest version serves requests that name none.
    return body.model_stats.sort((a, b) => Number(b.version) - Number(a.version))[0];
  } catch {
    return undefined;
  }
}

export function serverSide(
  before: ModelStatisticsSnapshot | undefined,
  after: ModelStatisticsSnapshot | undefined,
): ServerSide | undefined {
  if (after === undefined) return undefined;
  const earlier = new Map<number, number>();
  for (const b of before?.batch_stats ?? []) earlier.set(b.batch_size, b.compute_infer.count);
  const batches = new Map<number, number>();
  let rows = 0;
  let executions = 0;
  for (const b of after.batch_stats) {
    const n = b.compute_infer.count - (earlier.get(b.batch_size) ?? 0);
    if (n <= 0) continue;
    batches.set(b.batch_size, n);
    rows += n * b.batch_size;
    executions += n;
  }
  const s = after.inference_stats;
  const p = before?.inference_stats;
  const successes = s.success.count - (p?.success.count ?? 0);
  const per = (now: number, then: number | undefined) =>
    successes === 0 ? 0 : (now - (then ?? 0)) / successes / 1e6;
  return {
    batches,
    meanBatch: executions === 0 ? 0 : rows / executions,
    queueMs: per(s.queue.ns, p?.queue.ns),
    computeMs: per(
      s.compute_input.ns + s.compute_infer.ns + s.compute_output.ns,
      p === undefined ? undefined : p.compute_input.ns + p.compute_infer.ns + p.compute_output.ns,
    ),
  };
}
