// A model version's labelled metric series are made at its load and removed when it is
// unloaded, as Triton removes an unloaded model's. A reload loads the new version before
// the old one goes, and both observe the same labels: the series are shared by the
// observers alive for them, made by the first and removed by the last.

export class SeriesHolders {
  readonly #holders = new Map<string, number>();

  /** Counts a holder of `key`'s series; true for the first (which makes them). */
  hold(key: string): boolean {
    const held = this.#holders.get(key) ?? 0;
    this.#holders.set(key, held + 1);
    return held === 0;
  }

  /** Counts a holder gone; true for the last (which removes the series). */
  release(key: string): boolean {
    const left = (this.#holders.get(key) ?? 1) - 1;
    if (left > 0) {
      this.#holders.set(key, left);
      return false;
    }
    this.#holders.delete(key);
    return true;
  }
}
