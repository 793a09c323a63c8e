import type { TraceSettings } from "../config/trace-config.ts";

// Which requests are traced, as Triton picks them: every `rate`-th request (none when rate
// is 0), until `count` traces were taken (-1: no end); a request that carries its caller's
// trace context is always traced, whatever the rate and count. One sampler serves every
// model, as Triton's global settings do.

export class TraceSampler {
  readonly #rate: number;
  #left: number;
  #seen = 0;

  constructor(settings: Pick<TraceSettings, "rate" | "count">) {
    this.#rate = settings.rate;
    this.#left = settings.count;
  }

  /** Whether to trace the next request; `propagated` when it carries a trace context. */
  pick(propagated: boolean): boolean {
    if (propagated) return true;
    if (this.#rate === 0 || this.#left === 0) return false;
    if (++this.#seen < this.#rate) return false;
    this.#seen = 0;
    if (this.#left > 0) this.#left--;
    return true;
  }
}
