// Server-assigned sequence ids that no two replicas sharing a sequence tier ever both
// give out: blocks of numbers reserved from the tier ahead of need, so that assigning an
// id stays synchronous while a block lasts; the next block is asked for when half of the
// current one is used.

export class IdReservation {
  readonly #reserve: (count: number) => Promise<bigint>;
  readonly #blockSize: number;
  /** Reserved ranges [next, end), oldest first. */
  readonly #blocks: { next: bigint; end: bigint }[] = [];
  #refilling: Promise<void> | undefined;
  /** Counts drop()s: a block asked for before one is not kept. */
  #generation = 0;

  constructor(reserve: (count: number) => Promise<bigint>, blockSize = 1024) {
    this.#reserve = reserve;
    this.#blockSize = blockSize;
  }

  get #remaining(): bigint {
    let n = 0n;
    for (const block of this.#blocks) n += block.end - block.next;
    return n;
  }

  /** The next reserved number, or undefined when none is left (wait for ready()). */
  take(): bigint | undefined {
    const block = this.#blocks[0];
    let taken: bigint | undefined;
    if (block !== undefined) {
      taken = block.next++;
      if (block.next >= block.end) this.#blocks.shift();
    }
    if (this.#remaining * 2n < BigInt(this.#blockSize)) void this.#refill().catch(() => {});
    return taken;
  }

  /** Resolves once a number is reserved (rejects when the tier cannot be reached). */
  ready(): Promise<void> {
    return this.#blocks.length > 0 ? Promise.resolve() : this.#refill();
  }

  /**
   * Forgets the blocks held, and any block being asked for: the tier lost the counter
   * they were counted from (it restarted without persistence), and only the counter it
   * keeps now orders the ids given out from here on. The next ids come from a new block.
   */
  drop(): void {
    this.#blocks.length = 0;
    this.#generation++;
  }

  /** Reserves the next block, unless a reservation is under way already. */
  #refill(): Promise<void> {
    const generation = this.#generation;
    this.#refilling ??= this.#reserve(this.#blockSize)
      .then((first) => {
        if (generation === this.#generation)
          this.#blocks.push({ next: first, end: first + BigInt(this.#blockSize) });
      })
      .finally(() => {
        this.#refilling = undefined;
      });
    return this.#refilling;
  }
}
