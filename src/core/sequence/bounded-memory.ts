// A memory of entries by key, bounded in bytes (each entry costs what its owner says) and
// in count: the oldest are forgotten first, and one entry costing more than a sixteenth of
// the budget is not kept at all, so a few large ones cannot wipe the rest. The short
// memories of ended sequences (recent-ends.ts, ended-answers.ts) hold what clients chose
// (ids as long as a request body, answers of any size), so they are bounded this way.

export class BoundedMemory<Value> {
  readonly #budget: number;
  readonly #count: number;
  readonly #entries = new Map<string, { readonly value: Value; readonly bytes: number }>();
  #bytes = 0;

  constructor(budgetBytes: number, count = Number.POSITIVE_INFINITY) {
    this.#budget = budgetBytes;
    this.#count = count;
  }

  /** Bytes held now (as the entries' costs say), never above the budget. */
  get bytes(): number {
    return this.#bytes;
  }

  get size(): number {
    return this.#entries.size;
  }

  /** Keeps `value` for `key`, in place of what the key held, unless it costs too much to keep. */
  remember(key: string, value: Value, bytes: number): void {
    this.forget(key);
    if (bytes > this.#budget / 16) return;
    this.#entries.set(key, { value, bytes });
    this.#bytes += bytes;
    for (const oldest of this.#entries.keys()) {
      if (this.#bytes <= this.#budget && this.#entries.size <= this.#count) break;
      this.forget(oldest);
    }
  }

  get(key: string): Value | undefined {
    return this.#entries.get(key)?.value;
  }

  /** The entries kept, oldest first. */
  *entries(): IterableIterator<[string, Value]> {
    for (const [key, entry] of this.#entries) yield [key, entry.value];
  }

  forget(key: string): void {
    const entry = this.#entries.get(key);
    if (entry === undefined) return;
    this.#entries.delete(key);
    this.#bytes -= entry.bytes;
  }
}
