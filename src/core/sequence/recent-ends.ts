import type { SequenceId } from "../infer.ts";
import type { SequenceEndReason } from "../model.ts";
import { BoundedMemory } from "./bounded-memory.ts";

// A short memory of sequences that ended, and why, so that a request naming an id that
// is no longer live can be told whether it was closed, expired, timed out or never
// existed. Clients choose ids (KServe string ids can be as long as a request body), so
// the memory is bounded in bytes: the oldest ends are forgotten first, and an id too
// long to be worth keeping is not kept at all. The ends of a model version that is
// unloaded are kept on by its repository, in one such memory for all its models. The
// bounds are a BoundedMemory's (bounded-memory.ts).

export interface RecentEnd {
  readonly reason: SequenceEndReason;
  readonly endedAtMs: number;
  /** For a sequence a reload on another replica moved to another version of the model: that version. */
  readonly movedTo?: string | undefined;
}

/** The key of sequence `id` in the memory: integer and string ids apart. */
export const sequenceKey = (id: SequenceId): string => (typeof id === "bigint" ? `u${id}` : `s${id}`);

/** Default budget: about 6,000 UUID-sized ids. */
const RECENT_ENDS_BUDGET_BYTES = 1024 * 1024;

/** Map entry, timestamp and reason, beside the key's characters (an estimate of V8's cost). */
const ENTRY_OVERHEAD_BYTES = 96;

export class RecentEnds<End extends RecentEnd = RecentEnd> {
  readonly #ends: BoundedMemory<End>;

  constructor(budgetBytes = RECENT_ENDS_BUDGET_BYTES) {
    this.#ends = new BoundedMemory(budgetBytes);
  }

  /** Bytes held now (estimated), never above the budget. */
  get bytes(): number {
    return this.#ends.bytes;
  }

  get size(): number {
    return this.#ends.size;
  }

  remember(key: string, end: End): void {
    this.#ends.remember(key, end, 2 * key.length + ENTRY_OVERHEAD_BYTES);
  }

  get(key: string): End | undefined {
    return this.#ends.get(key);
  }

  /** The ends remembered, oldest first. */
  entries(): IterableIterator<[string, End]> {
    return this.#ends.entries();
  }

  /** The id is live again (a new START): its old end no longer describes it. */
  forget(key: string): void {
    this.#ends.forget(key);
  }
}
