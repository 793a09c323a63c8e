import type { SequenceId } from "../core/infer.ts";
import type { LoadedModel } from "../core/loaded-model.ts";
import type { UnloadedSequenceEnd } from "../core/model.ts";
import { RecentEnds, sequenceKey } from "../core/sequence/recent-ends.ts";

// The sequences of the model versions the repository unloaded, and how each ended. A
// version's memory of its ends goes with it; a client still holding one of its ids (a
// SageMaker session's) should hear that its model was unloaded, not that the id was
// never known. One memory for every model, bounded in bytes as each version's is: the
// oldest ends are forgotten first.

export class UnloadedSequences {
  readonly #ends = new RecentEnds<UnloadedSequenceEnd>();

  /** Keeps what `version`, now unloaded, remembers of its sequences' ends. */
  keep(version: LoadedModel): void {
    for (const [key, end] of version.sequenceEnds()) {
      this.#ends.remember(key, {
        model: version.name,
        version: version.version,
        reason: end.reason,
        endedAtMs: end.endedAtMs,
      });
    }
  }

  find(id: SequenceId): UnloadedSequenceEnd | undefined {
    return this.#ends.get(sequenceKey(id));
  }
}
