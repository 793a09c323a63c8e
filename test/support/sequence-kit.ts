import assert from "node:assert/strict";
import {
  getJson,
  type HttpAnswer,
  infer,
  type JsonInput,
  outputData,
  type SequenceParams,
} from "./http-client.ts";

// Helpers for the sequence-batcher end-to-end suite (test/e2e/sequence-*.test.ts): request
// inputs for the accumulator-style models, the sequences API read with exact ids, the
// per-batch-size execution counts of /stats, polling for an observable state, and a few
// config fragments every test model shares.

/** One INT32 value as a [1, 1] input (the accumulator's INPUT). */
export const int32Input = (value: number, name = "INPUT"): JsonInput[] => [
  { name, datatype: "INT32", shape: [1, 1], data: [value] },
];

// The accumulator's config lives beside its model (tools/onnx), for the benchmarks too.
export { ACCUMULATOR_CONTROLS, accumulatorConfig } from "../../tools/onnx/sequence-models.ts";

/** The accumulator's OUTPUT after one request (fails with the server's answer otherwise). */
export async function accumulate(
  url: string,
  model: string,
  value: number,
  sequence: SequenceParams,
): Promise<number> {
  const answer = await infer(url, model, int32Input(value), sequence);
  return outputData(answer, "OUTPUT")[0] as number;
}

/** Asserts an error answer: its status and its exact `{"error": ...}` message. */
export function assertError(answer: HttpAnswer, status: number, message: string | RegExp): void {
  assert.equal(
    answer.status,
    status,
    `expected ${status}, got ${answer.status}: ${JSON.stringify(answer.body)}`,
  );
  const error = answer.body.error;
  assert.equal(typeof error, "string", `no error message in ${JSON.stringify(answer.body)}`);
  if (typeof message === "string") assert.equal(error, message);
  else assert.match(error as string, message);
}

/** Triton's message for a request of a sequence the server does not (or no longer) know. */
export const startFlagMessage = (id: bigint | number | string, model: string): string =>
  `inference request for sequence ${id} to model '${model}' must specify the START flag on the first request of the sequence`;

// ---- /stats ----

/** Executions per batch size (Triton's batch_stats, padding rows included in the size). */
export async function batchCounts(url: string, model: string): Promise<Record<number, number>> {
  const answer = await getJson(`${url}/v2/models/${model}/stats`);
  assert.equal(answer.status, 200);
  const [stats] = answer.body.model_stats as {
    batch_stats: { batch_size: number; compute_infer: { count: number } }[];
  }[];
  const counts: Record<number, number> = {};
  for (const b of stats!.batch_stats) counts[b.batch_size] = b.compute_infer.count;
  return counts;
}

export async function executionCount(url: string, model: string): Promise<number> {
  const answer = await getJson(`${url}/v2/models/${model}/stats`);
  const [stats] = answer.body.model_stats as { execution_count: number }[];
  return stats!.execution_count;
}

// ---- the sequences API, with exact ids ----

export interface SequenceEntry {
  readonly id: bigint | string;
  readonly idType: string;
  readonly status: "active" | "backlogged" | "ending";
  readonly ageMs: number;
  readonly idleMs: number;
  readonly steps: number;
  readonly queued: number;
  readonly stateBytes: number;
  readonly instance: string | null;
  readonly slot: number | null;
  /** ISO 8601 UTC, for a sequence opened with an expiry (a SageMaker session). */
  readonly expiresAt: string | null;
}

export interface SequenceListing {
  readonly sequences: SequenceEntry[];
  readonly summary: {
    readonly live: number;
    readonly backlog: number;
    readonly state_bytes: number;
    readonly state_allocated_bytes: number;
    readonly ended: Record<string, number>;
  };
  /** The body as the server wrote it. */
  readonly text: string;
}

/**
 * GET /v2/models/{m}/sequences. uint64 ids are JSON numbers with exact digits, which
 * JSON.parse would round above 2^53: they are read from the text before parsing.
 */
export async function listSequences(url: string, model: string): Promise<SequenceListing> {
  const response = await fetch(`${url}/v2/models/${model}/sequences`, {
    headers: { "accept-encoding": "identity" },
  });
  const text = await response.text();
  assert.equal(response.status, 200, text);
  // `"id":<digits>` outside strings (inside a JSON string the quotes would be escaped).
  const exact = text.replace(/"id":(\d+)/g, '"id":{"uint64":"$1"}');
  const body = JSON.parse(exact) as {
    sequences: (Record<string, unknown> & { id: { uint64: string } | string })[];
    summary: SequenceListing["summary"];
  };
  return {
    text,
    summary: body.summary,
    sequences: body.sequences.map((s) => ({
      id: typeof s.id === "string" ? s.id : BigInt(s.id.uint64),
      idType: s.id_type as string,
      status: s.status as SequenceEntry["status"],
      ageMs: s.age_ms as number,
      idleMs: s.idle_ms as number,
      steps: s.steps as number,
      queued: s.queued as number,
      stateBytes: s.state_bytes as number,
      instance: s.instance as string | null,
      slot: s.slot as number | null,
      expiresAt: s.expires_at as string | null,
    })),
  };
}

/** The listing's entry for `id` (uint64 ids given as number or bigint), or undefined. */
export async function findSequence(
  url: string,
  model: string,
  id: bigint | number | string,
): Promise<SequenceEntry | undefined> {
  const wanted = typeof id === "number" ? BigInt(id) : id;
  return (await listSequences(url, model)).sequences.find((s) => s.id === wanted);
}

// ---- waiting for observable state ----

const pause = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/**
 * Polls `probe` until it returns a value other than undefined. The deadline is generous:
 * it only turns a hang into a failure, it measures nothing.
 */
export async function waitFor<T>(
  what: string,
  probe: () => Promise<T | undefined>,
  deadlineMs = 20_000,
): Promise<T> {
  const until = Date.now() + deadlineMs;
  for (;;) {
    const value = await probe();
    if (value !== undefined) return value;
    if (Date.now() > until) throw new Error(`gave up waiting for ${what}`);
    await pause(10);
  }
}

/** Waits until the sequence `id` is listed and satisfies `check`; returns its entry. */
export function waitForSequence(
  url: string,
  model: string,
  id: bigint | number | string,
  check: (entry: SequenceEntry) => boolean = () => true,
): Promise<SequenceEntry> {
  return waitFor(`sequence ${id} of '${model}'`, async () => {
    const entry = await findSequence(url, model, id);
    return entry !== undefined && check(entry) ? entry : undefined;
  });
}

/** Sleeps; only for proving that something does *not* happen within a while. */
export const sleep = pause;

/**
 * Expected per-batch-size counts of Direct batches: each batch spans rows 0..(highest slot
 * in it), so its size is that slot + 1.
 */
export function directBatchSizes(batches: readonly (readonly number[])[]): Record<number, number> {
  const counts: Record<number, number> = {};
  for (const slots of batches) {
    const size = Math.max(...slots) + 1;
    counts[size] = (counts[size] ?? 0) + 1;
  }
  return counts;
}

// ---- metrics ----

/** The value of a metric line `name{labels}` on the metrics port (labels in any order). */
export async function metricValue(
  metricsUrl: string,
  name: string,
  labels: Readonly<Record<string, string>>,
): Promise<number | undefined> {
  const text = await (await fetch(metricsUrl)).text();
  for (const line of text.split("\n")) {
    // A metric without labels has no braces.
    const match = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{([^}]*)\})? (\S+)$/.exec(line);
    if (match === null || match[1] !== name) continue;
    const found = Object.fromEntries(
      [...(match[2] ?? "").matchAll(/(\w+)="([^"]*)"/g)].map((m) => [m[1]!, m[2]!] as const),
    );
    if (Object.entries(labels).every(([k, v]) => found[k] === v)) return Number(match[3]);
  }
  return undefined;
}
