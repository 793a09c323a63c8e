import type { ModelStatisticsSnapshot } from "../core/statistics.ts";

// What the server says about a run: its statistics API read as the measured window opens
// and as it closes, so the difference covers about the window the client's figures cover
// (batches are not timestamped: one running across either edge counts where it ends).

export interface ServerSide {
  /** Executions by batch size. */
  readonly batches: Map<number, number>;
  readonly meanBatch: number;
  /** Per successful request, ms. */
  readonly queueMs: number;
  readonly computeMs: number;
}

/** The statistics read, or why the server refused them (401/403: the key given does not open them). */
export interface StatisticsReading {
  readonly snapshot: ModelStatisticsSnapshot | undefined;
  /** "<status>: <the server's message>" when the server refused the statistics API. */
  readonly refused: string | undefined;
}

export async function readStatistics(
  httpBase: string,
  model: string,
  headers: Readonly<Record<string, string>> = {},
): Promise<StatisticsReading> {
  try {
    const response = await fetch(`${httpBase}/v2/models/${encodeURIComponent(model)}/stats`, { headers });
    if (response.status === 401 || response.status === 403) {
      // Said in the report: without it the server's lines just went missing.
      return { snapshot: undefined, refused: `${response.status}: ${await errorText(response)}` };
    }
    if (!response.ok) return { snapshot: undefined, refused: undefined };
    const body = (await response.json()) as { model_stats: ModelStatisticsSnapshot[] };
    // The highest version serves requests that name none.
    const [snapshot] = body.model_stats.sort((a, b) => Number(b.version) - Number(a.version));
    return { snapshot, refused: undefined };
  } catch {
    return { snapshot: undefined, refused: undefined };
  }
}

/** A refusal's message: KServe's `{"error": …}`, or the body as it is. */
export async function errorText(response: Response): Promise<string> {
  const text = await response.text();
  try {
    const { error } = JSON.parse(text) as { error?: unknown };
    if (typeof error === "string") return error;
  } catch {
    // Not JSON: the text itself.
  }
  return text.trim();
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
