import type { StepAnswers } from "./step-answers.ts";

// The answers of the last numbered steps of sequences that ended by their END, kept a
// short while on a server without a state store. A client whose END's answer was lost (its
// stream dropped just after the END ran) sends the END again: the sequence is gone, so
// without this it was told to START, and a START would begin the sequence anew. With a
// store the ended record holds these answers (sequence-record.ts); this is that record for
// one server. Answers hold tensors, so the memory is bounded in bytes and in count, the
// oldest forgotten first, as the recent ends are (recent-ends.ts).

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
  readonly #budget: number;
  readonly #count: number;
  readonly #ended = new Map<string, { readonly ended: EndedAnswers; readonly bytes: number }>();
  #bytes = 0;

  constructor(budgetBytes = ENDED_ANSWERS_BUDGET_BYTES, count = ENDED_ANSWERS_KEPT) {
    this.#budget = budgetBytes;
    this.#count = count;
  }

  /** Bytes held now (estimated), never above the budget. */
  get bytes(): number {
    return this.#bytes;
  }

  get size(): number {
    return this.#ended.size;
  }

  /** Keeps `ended` for the id `key` (a sequenceKey), in place of what the id's earlier life left. */
  remember(key: string, ended: EndedAnswers): void {
    this.forget(key);
    const bytes = 2 * key.length + ENTRY_OVERHEAD_BYTES + ended.answers.bytes;
    // One sequence may take at most 1/16 of the memory: a few large answers cannot wipe it.
    if (bytes > this.#budget / 16) return;
    this.#ended.set(key, { ended, bytes });
    this.#bytes += bytes;
    for (const oldest of this.#ended.keys()) {
      if (this.#bytes <= this.#budget && this.#ended.size <= this.#count) break;
      this.forget(oldest);
    }
  }

  get(key: string): EndedAnswers | undefined {
    return this.#ended.get(key)?.ended;
  }

  forget(key: string): void {
    const entry = this.#ended.get(key);
    if (entry === undefined) return;
    this.#ended.delete(key);
    this.#bytes -= entry.bytes;
  }
}
