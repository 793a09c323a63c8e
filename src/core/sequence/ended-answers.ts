import { BoundedMemory } from "./bounded-memory.ts";
import type { StepAnswers } from "./step-answers.ts";

// The answers of the last numbered steps of sequences that ended by their END, kept a
// short while on a server without a state store. A client whose END's answer was lost (its
// stream dropped just after the END ran) sends the END again: the sequence is gone, so
// without this it was told to START, and a START would begin the sequence anew. With a
// store the ended record holds these answers (sequence-record.ts); this is that record for
// one server. Answers hold tensors, so the memory is bounded in bytes and in count, the
// oldest forgotten first, in a BoundedMemory as the recent ends are (recent-ends.ts).

export interface EndedAnswers {
  /** The caller that owned the sequence: another caller is refused, not handed its answers. */
  readonly owner: string | undefined;
  readonly answers: StepAnswers;
}

/** Default bounds: 16 MiB of answers, of at most 1,024 sequences. */
const ENDED_ANSWERS_BUDGET_BYTES = 16 * 1024 * 1024;
const ENDED_ANSWERS_KEPT = 1024;

/** Map entry and owner, beside the key's characters and the answers (an estimate of V8's cost). */
const ENTRY_OVERHEAD_BYTES = 128;

export class EndedAnswersMemory {
  readonly #ended: BoundedMemory<EndedAnswers>;

  constructor(budgetBytes = ENDED_ANSWERS_BUDGET_BYTES, count = ENDED_ANSWERS_KEPT) {
    this.#ended = new BoundedMemory(budgetBytes, count);
  }

  /** Bytes held now (estimated), never above the budget. */
  get bytes(): number {
    return this.#ended.bytes;
  }

  get size(): number {
    return this.#ended.size;
  }

  /** Keeps `ended` for the id `key` (a sequenceKey), in place of what the id's earlier life left. */
  remember(key: string, ended: EndedAnswers): void {
    this.#ended.remember(key, ended, 2 * key.length + ENTRY_OVERHEAD_BYTES + ended.answers.bytes);
  }

  get(key: string): EndedAnswers | undefined {
    return this.#ended.get(key);
  }

  forget(key: string): void {
    this.#ended.forget(key);
  }
}
