// When each request of an open-loop run is due. Step k of lane l is due at
// (k·lanes + l) / rate seconds after the measured window opens; a request sent late still
// counts its latency from its due time, so a slow server cannot hide its queueing (no
// coordinated omission).
//
// The warm-up before the window follows the same rate, but a lane that is late skips the
// slots it missed instead of catching up. Catching up, a server still warming up gathered
// a backlog that the window then measured for seconds (1 s tails at 1000 requests/s that
// ended by themselves 6 s into the run).

export class RateSchedule {
  readonly #lanes: number;
  readonly #lane: number;
  readonly #rate: number;
  readonly #start: number;
  readonly #measureFrom: number;
  #k = 0;
  #measuring = false;

  /** Times in ms (performance.now()); `rate` in requests per second over all lanes. */
  constructor(options: { lanes: number; lane: number; rate: number; start: number; measureFrom: number }) {
    this.#lanes = options.lanes;
    this.#lane = options.lane;
    this.#rate = options.rate;
    this.#start = options.start;
    this.#measureFrom = options.measureFrom;
  }

  /** When the lane's next request is due, asked at `now`; each call takes a slot. */
  next(now: number): number {
    if (!this.#measuring && now >= this.#measureFrom) {
      this.#measuring = true;
      this.#k = 0;
    }
    if (!this.#measuring) {
      // Skip to the first slot not yet past.
      const k = Math.ceil((((now - this.#start) / 1000) * this.#rate - this.#lane) / this.#lanes);
      this.#k = Math.max(this.#k, k);
      const slot = this.#slot(this.#start, this.#k);
      if (slot < this.#measureFrom) {
        this.#k++;
        return slot;
      }
      // The next warm-up slot falls in the window: the window's own schedule takes over.
      this.#measuring = true;
      this.#k = 0;
    }
    return this.#slot(this.#measureFrom, this.#k++);
  }

  /** How many of the window's slots before `end`, from the one last given, the lane has left. */
  slotsLeftBefore(end: number): number {
    let left = 0;
    // Counted with the same arithmetic that gave the slots, so none is counted twice.
    for (let k = this.#k - 1; this.#slot(this.#measureFrom, k) < end; k++) left++;
    return left;
  }

  #slot(origin: number, k: number): number {
    return origin + ((k * this.#lanes + this.#lane) / this.#rate) * 1000;
  }
}
