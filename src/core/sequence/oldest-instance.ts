import type { ModelExecutor } from "../executor.ts";
import type { SequenceStrategy } from "../model-config.ts";
import type { OrderedRelease } from "../scheduler/ordered-release.ts";
import { Deque } from "../scheduler/request-queue.ts";
import type { Sequence } from "./sequence.ts";
import { rowKey, type SequenceModel, type SequenceRow } from "./sequence-batch-execution.ts";
import { SequenceInstance, type SequenceOwner } from "./sequence-instance.ts";

type OldestStrategy = Extract<SequenceStrategy, { kind: "oldest" }>;

/**
 * Triton's Oldest strategy: up to max_candidate_sequences sequences per instance; each
 * batch takes the oldest waiting request of each ready sequence (at most one request per
 * sequence in flight), oldest first, up to max_batch_size rows, no padding. A batch leaves
 * when it reaches the largest preferred size, when its oldest request has waited
 * max_queue_delay_microseconds, or at once when no delay is set. While one batch runs, a
 * second may go to the executor only when it is full, so the worker never waits for this
 * thread between batches and batches are not split.
 */
export class OldestInstance extends SequenceInstance {
  readonly #members = new Set<Sequence>();
  /**
   * Which member holds each slot. A slot only names a sequence's place in the listing
   * (batch rows are packed), but it must be its own: numbering by member count gave a new
   * sequence the slot of one still live after an earlier one had left.
   */
  readonly #slots: (Sequence | undefined)[] = [];
  /** Sequences that became ready, in the order they did (≈ the age of their next request). */
  readonly #ready = new Deque<Sequence>();
  readonly #queued = new Set<Sequence>();
  readonly #maxRows: number;
  readonly #targetRows: number;
  readonly #delayNs: number;

  constructor(
    model: SequenceModel,
    owner: SequenceOwner,
    executor: ModelExecutor,
    strategy: OldestStrategy,
    ordering: OrderedRelease | undefined,
  ) {
    super(model, owner, executor, strategy.maxCandidateSequences, 2, ordering);
    this.#maxRows = Math.max(1, model.config.maxBatchSize);
    const preferred = strategy.preferredBatchSizes;
    this.#targetRows = preferred.length > 0 ? Math.min(this.#maxRows, Math.max(...preferred)) : this.#maxRows;
    this.#delayNs = strategy.maxQueueDelayUs * 1000;
  }

  get occupied(): number {
    return this.#members.size;
  }

  bind(sequence: Sequence): void {
    this.#members.add(sequence);
    let slot = this.#slots.indexOf(undefined);
    if (slot < 0) slot = this.#slots.length;
    this.#slots[slot] = sequence;
    sequence.holder = this;
    sequence.slot = slot;
  }

  release(sequence: Sequence, slot: number): void {
    if (!this.#members.delete(sequence)) return;
    if (this.#slots[slot] === sequence) this.#slots[slot] = undefined;
    this.owner.slotFreed(this);
  }

  handOver(sequence: Sequence, successor: Sequence): void {
    this.#members.delete(sequence);
    this.#members.add(successor);
    successor.holder = this;
    successor.slot = sequence.slot;
    if (sequence.slot !== undefined) this.#slots[sequence.slot] = successor;
  }

  protected sequenceWoke(sequence: Sequence): void {
    if (this.#queued.has(sequence)) return;
    this.#queued.add(sequence);
    this.#ready.push(sequence);
  }

  protected nextBatch(): (SequenceRow | undefined)[] | undefined {
    const chosen: SequenceRow[] = [];
    const skipped: Sequence[] = [];
    let key: string | undefined;
    let oldestNs = Number.POSITIVE_INFINITY;
    while (chosen.length < this.#maxRows) {
      const sequence = this.#ready.shift();
      if (sequence === undefined) break;
      this.#queued.delete(sequence);
      const row = this.headOf(sequence);
      if (row === undefined) continue;
      const rowKeyValue = rowKey(this.model, row);
      if (key === undefined) key = rowKeyValue;
      if (rowKeyValue !== key) {
        skipped.push(sequence);
        continue;
      }
      chosen.push(row);
      oldestNs = Math.min(oldestNs, row.request.arrivalNs);
      if (chosen.length >= this.#targetRows) break;
    }
    const waitedNs = performance.now() * 1e6 - oldestNs;
    const short = chosen.length > 0 && chosen.length < this.#targetRows;
    // Behind a running batch, only a full one goes: a short one would only split the
    // requests that would otherwise join the next batch when the running one ends.
    const wait = short && (this.inFlight > 0 || (this.#delayNs > 0 && waitedNs < this.#delayNs));
    // Put back what did not go, ahead of newer arrivals, keeping their order. The newer
    // ones never left the queue (they are still marked queued): they only move behind.
    const back = wait ? [...chosen.map((r) => r.sequence), ...skipped] : skipped;
    if (back.length > 0) {
      const rest = this.#ready.drain();
      for (const s of back) {
        this.#queued.add(s);
        this.#ready.push(s);
      }
      for (const s of rest) this.#ready.push(s);
    }
    if (chosen.length === 0) return undefined;
    if (wait) {
      // A running batch's end brings the decision back by itself.
      if (this.inFlight === 0) this.retryIn((this.#delayNs - waitedNs) / 1e6);
      return undefined;
    }
    for (const row of chosen) row.sequence.queue.shift();
    return chosen;
  }
}
