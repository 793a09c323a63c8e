import type { TraceLevel } from "../core/trace-settings.ts";

// One trace setting in force (the global one, or a model's), and which requests it
// traces, as Triton samples: every `rate`-th request (none when rate is 0) until `count`
// traces were taken (-1: no end). A forced request (one carrying its caller's trace
// context, in OpenTelemetry mode) is traced whatever the rate and count, and still counts
// toward the rate. A changed setting is a new object with its counters from zero, as in
// Triton; the count it starts from is what was left.

export interface TraceFields {
  readonly level: TraceLevel;
  readonly rate: number;
  readonly count: number;
  readonly logFrequency: number;
}

/** Which fields a setting sets itself; the others follow its fallback (see trace-manager.ts). */
export type SpecifiedFields = Readonly<Record<keyof TraceFields, boolean>>;

export const NONE_SPECIFIED: SpecifiedFields = Object.freeze({
  level: false,
  rate: false,
  count: false,
  logFrequency: false,
});

export class TraceSetting implements TraceFields {
  readonly level: TraceLevel;
  readonly rate: number;
  readonly logFrequency: number;
  readonly specified: SpecifiedFields;
  /** Whether it started with a count: its traces go to an indexed file (triton-trace-file.ts). */
  readonly limited: boolean;
  #left: number;
  #seen = 0;

  constructor(fields: TraceFields, specified: SpecifiedFields) {
    this.level = fields.level;
    this.rate = fields.rate;
    this.logFrequency = fields.logFrequency;
    this.specified = specified;
    this.#left = fields.count;
    this.limited = fields.count >= 0;
  }

  /** Traces left to take; -1 never stops. */
  get count(): number {
    return this.#left;
  }

  get on(): boolean {
    return this.level.timestamps || this.level.tensors;
  }

  /** Whether to trace the next request. */
  pick(forced: boolean): boolean {
    if (!this.on) return false;
    let hit = false;
    if (this.rate !== 0) {
      if (this.#left === 0 && !forced) return false;
      hit = ++this.#seen % this.rate === 0;
      if (hit && this.#left > 0) this.#left--;
      else if (hit && this.#left === 0) hit = false;
    }
    return hit || forced;
  }
}
