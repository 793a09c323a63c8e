import type { StatDuration } from "./statistics.ts";

// Triton's `response_stats` for a decoupled model: its responses aggregated by their
// index within their request ("0" is every request's first response, "1" its second, …).
// Each response is one of: success (sent with outputs), empty (the request completed with
// no response after its last, Triton's empty final response), fail (the request failed
// after it reached the model) or cancel (the client stopped it while the model had it).
//
// The counters of index i sit at i * FIELDS in one Float64Array that grows by doubling:
// the keys are dense (every request starts at 0), and the memory a client can make this
// hold is bounded by MAX_RESPONSE_INDEX, not by how many responses a request asks for.

/** Responses at this index or later in their request are not aggregated (1.5 MB at most). */
export const MAX_RESPONSE_INDEX = 16_384;

export type ResponseOutcome = "success" | "fail" | "empty_response" | "cancel";

/** The statistics of each response index, in Triton's order. */
export const RESPONSE_STAT_KINDS = [
  "compute_infer",
  "compute_output",
  "success",
  "fail",
  "empty_response",
  "cancel",
] as const;

type Kind = (typeof RESPONSE_STAT_KINDS)[number];

export type ResponseStats = Readonly<Record<Kind, StatDuration>>;

/** A count and a duration sum per kind, at OFFSET[kind] and the place after it. */
const FIELDS = RESPONSE_STAT_KINDS.length * 2;
const OFFSET = Object.fromEntries(RESPONSE_STAT_KINDS.map((kind, i) => [kind, 2 * i])) as Readonly<
  Record<Kind, number>
>;

export class ResponseStatistics {
  #counters = new Float64Array(0);
  /** Indexes seen: 0 … size − 1. */
  #size = 0;

  /**
   * One response at `index` of its request. `inferNs` is the time the model took to
   * produce it (from when the request reached it, or from the previous response);
   * `outputNs` the time to hand its outputs on. As Triton counts them: a success adds to
   * both, a failure or an empty response (no outputs) to compute_infer, a cancellation to
   * neither.
   */
  record(index: number, outcome: ResponseOutcome, inferNs: number, outputNs = 0): void {
    if (index >= MAX_RESPONSE_INDEX) return;
    if (index >= this.#size) this.#grow(index + 1);
    const infer = Math.round(inferNs);
    const output = Math.round(outputNs);
    const at = index * FIELDS;
    const c = this.#counters;
    if (outcome !== "cancel") {
      c[at + OFFSET.compute_infer]! += 1;
      c[at + OFFSET.compute_infer + 1]! += infer;
      if (outcome === "success") {
        c[at + OFFSET.compute_output]! += 1;
        c[at + OFFSET.compute_output + 1]! += output;
      }
    }
    const o = at + OFFSET[outcome];
    c[o]! += 1;
    c[o + 1]! += infer + output;
  }

  #grow(size: number): void {
    if (size * FIELDS > this.#counters.length) {
      let capacity = Math.max(8, this.#counters.length / FIELDS);
      while (capacity < size) capacity *= 2;
      const counters = new Float64Array(Math.min(capacity, MAX_RESPONSE_INDEX) * FIELDS);
      counters.set(this.#counters);
      this.#counters = counters;
    }
    this.#size = size;
  }

  /** The statistics by index, as Triton's `response_stats` map gives them. */
  snapshot(): Record<string, ResponseStats> {
    const out: Record<string, ResponseStats> = {};
    const c = this.#counters;
    for (let index = 0; index < this.#size; index++) {
      const at = index * FIELDS;
      const stats = {} as Record<Kind, StatDuration>;
      for (const kind of RESPONSE_STAT_KINDS) {
        const o = at + OFFSET[kind];
        stats[kind] = { count: c[o]!, ns: c[o + 1]! };
      }
      out[String(index)] = stats;
    }
    return out;
  }
}

/**
 * What one request's responses add to the statistics, in the order they happen: each
 * response sent, then how the request ended. Times are in ns on the `performance.now()`
 * clock; `startNs` is when the model got the request.
 */
export class RequestResponses {
  readonly #statistics: ResponseStatistics;
  #index = 0;
  /** When the model began on the next response: the request's dispatch, or the last response. */
  #markNs: number | undefined;
  #lastWasFinal = false;
  #cancelledAtNs: number | undefined;

  constructor(statistics: ResponseStatistics) {
    this.#statistics = statistics;
  }

  /**
   * A response the model sent reached the server at `receivedNs` and was handed on at
   * `endNs`; `startNs` is when the request reached the model.
   */
  sent(startNs: number, receivedNs: number, endNs: number, final: boolean): void {
    if (this.#cancelledAtNs !== undefined) return;
    const from = this.#markNs ?? startNs;
    this.#statistics.record(this.#index++, "success", receivedNs - from, endNs - receivedNs);
    this.#markNs = endNs;
    this.#lastWasFinal = final;
  }

  /** The client stopped the request at `atNs`. */
  cancelled(atNs: number): void {
    this.#cancelledAtNs ??= atNs;
  }

  /**
   * The request ended at `endNs`: completed (`failed` false), or with an error. Nothing
   * is added for a request the model never got (`startNs` 0): its end is no response of
   * the model's.
   */
  ended(startNs: number, endNs: number, failed: boolean): void {
    if (startNs === 0) return;
    const from = this.#markNs ?? startNs;
    if (this.#cancelledAtNs !== undefined) {
      this.#statistics.record(this.#index++, "cancel", endNs - Math.max(this.#cancelledAtNs, from));
    } else if (failed) {
      this.#statistics.record(this.#index++, "fail", endNs - from);
    } else if (!this.#lastWasFinal) {
      this.#statistics.record(this.#index++, "empty_response", endNs - from);
    }
  }
}
