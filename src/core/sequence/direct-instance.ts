import type { ModelExecutor } from "../executor.ts";
import type { SequenceStrategy } from "../model-config.ts";
import type { Sequence } from "./sequence.ts";
import { rowKey, type SequenceModel, type SequenceRow } from "./sequence-batch-execution.ts";
import { SequenceInstance, type SequenceOwner } from "./sequence-instance.ts";

type DirectStrategy = Extract<SequenceStrategy, { kind: "direct" }>;

/**
 * Triton's Direct strategy: a sequence owns one slot, and slot i is always batch row i.
 * A batch spans rows 0..(highest slot with a request); rows without a request are padding
 * (READY false). With minimum_slot_utilization > 0 a batch waits up to
 * max_queue_delay_microseconds for enough slots to have work.
 */
export class DirectInstance extends SequenceInstance {
  readonly #slots: (Sequence | undefined)[];
  readonly #strategy: DirectStrategy;
  #occupied = 0;

  constructor(model: SequenceModel, owner: SequenceOwner, executor: ModelExecutor, strategy: DirectStrategy) {
    super(model, owner, executor, Math.max(1, model.config.maxBatchSize));
    this.#slots = new Array(this.capacity).fill(undefined);
    this.#strategy = strategy;
  }

  get occupied(): number {
    return this.#occupied;
  }

  bind(sequence: Sequence): void {
    const slot = this.#slots.indexOf(undefined);
    this.#slots[slot] = sequence;
    this.#occupied++;
    sequence.holder = this;
    sequence.slot = slot;
  }

  release(sequence: Sequence, slot: number): void {
    if (this.#slots[slot] !== sequence) return;
    this.#slots[slot] = undefined;
    this.#occupied--;
    this.owner.slotFreed(this);
  }

  handOver(sequence: Sequence, successor: Sequence): void {
    const slot = sequence.slot!;
    this.#slots[slot] = successor;
    successor.holder = this;
    successor.slot = slot;
  }

  protected sequenceWoke(): void {}

  protected nextBatch(): (SequenceRow | undefined)[] | undefined {
    const candidates: { slot: number; row: SequenceRow; key: string }[] = [];
    for (let slot = 0; slot < this.#slots.length; slot++) {
      const sequence = this.#slots[slot];
      if (sequence === undefined) continue;
      const row = this.headOf(sequence);
      if (row !== undefined) candidates.push({ slot, row, key: rowKey(this.model, row) });
    }
    if (candidates.length === 0) return undefined;

    // The oldest waiting request decides which shapes run now; the others wait a turn.
    let oldest = candidates[0]!;
    for (const c of candidates) if (c.row.request.arrivalNs < oldest.row.request.arrivalNs) oldest = c;
    const chosen = candidates.filter((c) => c.key === oldest.key);

    const { minimumSlotUtilization, maxQueueDelayUs } = this.#strategy;
    if (
      minimumSlotUtilization > 0 &&
      maxQueueDelayUs > 0 &&
      chosen.length / this.capacity < minimumSlotUtilization
    ) {
      const waitedUs = (performance.now() * 1e6 - oldest.row.request.arrivalNs) / 1000;
      if (waitedUs < maxQueueDelayUs) {
        this.retryIn((maxQueueDelayUs - waitedUs) / 1000);
        return undefined;
      }
    }

    const size = this.model.config.maxBatchSize > 0 ? Math.max(...chosen.map((c) => c.slot)) + 1 : 1;
    const rows: (SequenceRow | undefined)[] = new Array(size).fill(undefined);
    for (const c of chosen) {
      c.row.sequence.queue.shift();
      rows[this.model.config.maxBatchSize > 0 ? c.slot : 0] = c.row;
    }
    return rows;
  }
}
