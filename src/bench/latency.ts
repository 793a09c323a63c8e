// Latencies and failures of one load run. Every answered request's latency is kept (8
// bytes each: a ten-second run at 20k requests/s is 1.6 MB), so percentiles are exact.

export class LatencyRecorder {
  #values = new Float64Array(1 << 16);
  #count = 0;
  readonly errors = new Map<string, number>();
  /** The first message of each kind of failure: what a count alone does not say. */
  readonly firstMessages = new Map<string, string>();

  record(ms: number): void {
    if (this.#count === this.#values.length) {
      const grown = new Float64Array(this.#values.length * 2);
      grown.set(this.#values);
      this.#values = grown;
    }
    this.#values[this.#count++] = ms;
  }

  /** Counts a failure under a short kind (an HTTP status, a gRPC code, "timeout", ...). */
  fail(kind: string, message?: string): void {
    this.errors.set(kind, (this.errors.get(kind) ?? 0) + 1);
    if (message !== undefined && !this.firstMessages.has(kind)) {
      this.firstMessages.set(kind, message.length > 300 ? `${message.slice(0, 300)}…` : message);
    }
  }

  get count(): number {
    return this.#count;
  }

  get failures(): number {
    let total = 0;
    for (const n of this.errors.values()) total += n;
    return total;
  }

  /** Latency percentiles in ms (p in [0, 100]); NaN when nothing was recorded. */
  percentiles(ps: readonly number[]): number[] {
    if (this.#count === 0) return ps.map(() => Number.NaN);
    const sorted = this.#values.slice(0, this.#count).sort();
    return ps.map(
      (p) => sorted[Math.min(this.#count - 1, Math.ceil((p / 100) * this.#count) - 1)] ?? sorted[0]!,
    );
  }
}
