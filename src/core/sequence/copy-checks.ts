import { timerDelay } from "../timer-delay.ts";

// With a tier, a replica's copy of a sequence may be of one that went on, or ended, on
// another replica (a balancer without stickiness): before such a copy ends at its idle
// timeout here, or while a session's copy sits quiet here, the replica asks the tier
// whether it is still the current one. The questions go in batches: every copy waiting
// is asked about in one look, one look at a time and at most one per interval, so a
// replica with many quiet copies reads the tier at a bounded rate.

export class CopyChecks<Copy> {
  /** Copies waiting for the next look. */
  readonly #waiting = new Set<Copy>();
  /** Asks the tier about the copies and acts on its answers; never rejects. */
  readonly #look: (copies: readonly Copy[]) => Promise<void>;
  readonly #intervalMs: number;
  #looking = false;
  /** When the last look began (epoch ms), and the timer of the next one. */
  #lastLookMs = Number.NEGATIVE_INFINITY;
  #timer: NodeJS.Timeout | undefined;

  constructor(look: (copies: readonly Copy[]) => Promise<void>, intervalMs: number) {
    this.#look = look;
    this.#intervalMs = intervalMs;
  }

  /** `copy` is asked about in the next look (one under way has already read its copies). */
  add(copy: Copy): void {
    this.#waiting.add(copy);
    this.#schedule();
  }

  /** Forgets the copies waiting (the model stops, or is reloaded); a look under way ends as it will. */
  clear(): void {
    this.#waiting.clear();
    if (this.#timer !== undefined) clearTimeout(this.#timer);
    this.#timer = undefined;
  }

  #schedule(): void {
    if (this.#looking || this.#timer !== undefined || this.#waiting.size === 0) return;
    const waitMs = this.#lastLookMs + this.#intervalMs - Date.now();
    if (waitMs > 0) {
      this.#timer = setTimeout(() => {
        this.#timer = undefined;
        this.#schedule();
      }, timerDelay(waitMs));
      this.#timer.unref();
      return;
    }
    void this.#run();
  }

  async #run(): Promise<void> {
    const copies = [...this.#waiting];
    this.#waiting.clear();
    this.#lastLookMs = Date.now();
    this.#looking = true;
    try {
      await this.#look(copies);
    } finally {
      this.#looking = false;
      this.#schedule();
    }
  }
}
