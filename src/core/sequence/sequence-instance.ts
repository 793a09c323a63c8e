import { asServerError } from "../errors.ts";
import { isRequestExecutor, type ModelExecutor } from "../executor.ts";
import type { SequenceEndReason } from "../model.ts";
import { type OrderedRelease, takePlace } from "../scheduler/ordered-release.ts";
import type { PendingRequest } from "../scheduler/pending-request.ts";
import { timerDelay } from "../timer-delay.ts";
import type { Sequence, SlotHolder } from "./sequence.ts";
import {
  runSequenceBatch,
  type SequenceModel,
  type SequenceRow,
  type StepOutcome,
} from "./sequence-batch-execution.ts";
import { runSequenceRequests } from "./sequence-request-execution.ts";
import type { SequenceState } from "./state-store.ts";

/** What an instance tells the batcher that owns the sequences. */
export interface SequenceOwner {
  /** A step of `sequence` finished (successfully or not); it may now end or run again. */
  afterStep(sequence: Sequence): void;
  /** Runs requests at the head of `sequence`'s queue that need no model run (END with infer_end_requests off). */
  settleWithoutRun(sequence: Sequence): boolean;
  /** A slot of `instance` became free. */
  slotFreed(instance: SequenceInstance): void;
  /** A running request of `sequence` was cancelled by its client: the sequence ends, as for a queued one. */
  runningRequestCancelled(sequence: Sequence, request: PendingRequest): void;
}

/**
 * One model instance under the sequence batcher: a fixed number of slots, each held by
 * one sequence for its life, and at most `maxInFlight` batches in flight (a sequence is in
 * at most one of them, so its state is read only after its previous step wrote it).
 * Strategies decide which queued requests form the next batch.
 */
export abstract class SequenceInstance implements SlotHolder {
  readonly executor: ModelExecutor;
  readonly capacity: number;
  protected readonly model: SequenceModel;
  protected readonly owner: SequenceOwner;
  /**
   * Batches handed to the executor and not finished. A second one lets the worker start
   * the next batch while this thread scatters the last one's results and answers them.
   */
  readonly #maxInFlight: number;
  #inFlight = 0;
  #scheduled = false;
  #timer: NodeJS.Timeout | undefined;
  /** No batch starts while paused (a reload is taking the sequences' state). */
  #paused = false;
  #quietWaiters: (() => void)[] = [];
  /** Requests of model code still running (a decoupled one may outlast its batch). */
  #runningRequests = 0;
  /** Requests in the batches handed to the executor and not yet back from it. */
  #running = 0;
  /** preserve_ordering: the order answers leave in, shared by the model's instances. */
  readonly #ordering: OrderedRelease | undefined;

  constructor(
    model: SequenceModel,
    owner: SequenceOwner,
    executor: ModelExecutor,
    capacity: number,
    maxInFlight = 1,
    ordering?: OrderedRelease,
  ) {
    this.#maxInFlight = maxInFlight;
    this.#ordering = ordering;
    this.model = model;
    this.owner = owner;
    this.executor = executor;
    this.capacity = capacity;
  }

  get instanceName(): string {
    return this.executor.name;
  }

  abstract get occupied(): number;
  /** Gives `sequence` a free slot (the caller checked there is one). */
  abstract bind(sequence: Sequence): void;
  abstract release(sequence: Sequence, slot: number): void;
  /** Puts `successor` in the slot `sequence` leaves (a restart keeps its slot). */
  abstract handOver(sequence: Sequence, successor: Sequence): void;
  /** The next batch (undefined entries are padding rows), or undefined to wait. */
  protected abstract nextBatch(): (SequenceRow | undefined)[] | undefined;
  protected abstract sequenceWoke(sequence: Sequence): void;

  /** Batches running now: a strategy may ask more of a batch that would queue behind another. */
  protected get inFlight(): number {
    return this.#inFlight;
  }

  get free(): number {
    return this.capacity - this.occupied;
  }

  /** Requests handed to the executor (running, or next in its worker) and not yet back. */
  get running(): number {
    return this.#running;
  }

  wake(sequence: Sequence): void {
    this.sequenceWoke(sequence);
    this.schedule();
  }

  /** Starts no more batches; resolves once none is running (every state in the store is final). */
  pause(): Promise<void> {
    this.#paused = true;
    if (this.#quiet) return Promise.resolve();
    return new Promise((resolve) => this.#quietWaiters.push(resolve));
  }

  /** No batch and no request of model code is running: every state in the store is final. */
  get #quiet(): boolean {
    return this.#inFlight === 0 && this.#runningRequests === 0;
  }

  #notifyQuiet(): void {
    if (this.#quiet) for (const quiet of this.#quietWaiters.splice(0)) quiet();
  }

  resume(): void {
    this.#paused = false;
    this.schedule();
  }

  /** Coalesces the arrivals of one event-loop turn into one batching decision. */
  protected schedule(): void {
    if (this.#paused || this.#scheduled || this.#inFlight >= this.#maxInFlight) return;
    this.#scheduled = true;
    setImmediate(() => {
      this.#scheduled = false;
      this.#run();
    });
  }

  /** Brings the decision back after `ms` (queue delays). */
  protected retryIn(ms: number): void {
    if (this.#timer !== undefined) return;
    this.#timer = setTimeout(
      () => {
        this.#timer = undefined;
        this.schedule();
      },
      timerDelay(Math.max(1, Math.ceil(ms))),
    );
    // The timer is not cleared when a batch leaves early (it then only re-checks), and
    // the server's sockets keep the process alive anyway: unref'd, a long queue delay no
    // longer holds a stopped server's process open until it runs out.
    this.#timer.unref();
  }

  #run(): void {
    if (this.#paused || this.#inFlight >= this.#maxInFlight) return;
    const rows = this.nextBatch();
    if (rows === undefined) return;
    this.#inFlight++;
    const real = rows.filter((r): r is SequenceRow => r !== undefined);
    for (const row of real) row.sequence.running = true;
    this.#running += real.length;
    const ordering = this.#ordering;
    if (ordering !== undefined) for (const row of real) takePlace(ordering, row.request);
    if (isRequestExecutor(this.executor)) {
      // Model code answers each request on its own time: a sequence steps again when its
      // request is complete; the instance takes another batch when the executor is ready.
      this.#runningRequests += real.length;
      runSequenceRequests(this.model, this.executor, rows, (row, outcome) => {
        this.#runningRequests--;
        this.#running--;
        row.sequence.running = false;
        row.sequence.steps++;
        const signal = row.request.request.signal;
        if (outcome?.ok === false && outcome.error.code === "CANCELLED" && signal?.aborted === true) {
          this.owner.runningRequestCancelled(row.sequence, row.request);
        } else this.owner.afterStep(row.sequence);
        this.#notifyQuiet();
      }).finally(() => {
        this.#inFlight--;
        this.#notifyQuiet();
        this.schedule();
      });
      return;
    }
    const stepped = (): void => {
      for (const row of real) {
        row.sequence.running = false;
        row.sequence.steps++;
        this.owner.afterStep(row.sequence);
      }
    };
    const ran = (outcome: StepOutcome): void => {
      this.#inFlight--;
      this.#running -= real.length;
      if (outcome.written === undefined) stepped();
      else {
        // The next batch may run while this one's state is written through (the rows'
        // sequences wait for it: each steps again only once its state is safe).
        this.#runningRequests += real.length;
        void outcome.written.finally(() => {
          this.#runningRequests -= real.length;
          stepped();
          this.#notifyQuiet();
        });
      }
      this.#notifyQuiet();
      this.schedule();
    };
    runSequenceBatch(this.model, this.executor, rows).then(ran, (error: unknown) => {
      // runSequenceBatch answers every row itself; should it throw, no row is left waiting.
      const failure = asServerError(error);
      for (const row of real) row.request.reject(failure);
      ran({ ok: false });
    });
  }

  /** Tells model code that keeps per-sequence data that `sequence` ended (after its last step). */
  sequenceEnded(sequence: Sequence, reason: SequenceEndReason, state: SequenceState | undefined): void {
    if (!isRequestExecutor(this.executor) || sequence.steps === 0) return;
    this.executor.sequenceEnded({ id: sequence.id, key: sequence.key, reason, state });
  }

  /** The request `sequence` would run next, after settling any that need no model run. */
  protected headOf(sequence: Sequence): SequenceRow | undefined {
    if (!sequence.ready) return undefined;
    if (this.owner.settleWithoutRun(sequence) && !sequence.ready) return undefined;
    const request = sequence.queue.peek();
    return request === undefined ? undefined : { sequence, request };
  }
}
