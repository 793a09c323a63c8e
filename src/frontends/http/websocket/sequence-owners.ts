import type { SequenceId } from "../../../core/infer.ts";
import type { ServedModel } from "../../../core/model.ts";

// Which stream owns each sequence. A client that reconnects with its id starts the
// sequence again from the new stream (the core restarts it); the old stream, whose close
// may only be noticed later, must then neither continue nor end the new sequence.
// Only streams are tracked: a start sent over plain HTTP takes an id without the streams
// knowing.

export class SequenceOwners {
  readonly #owners = new Map<string, object>();

  /** The key of `id` in `model` (ids of different model versions are different sequences). */
  static key(model: ServedModel, id: SequenceId): string {
    return `${model.name}\u0000${model.version}\u0000${typeof id === "bigint" ? "u" : "s"}${id}`;
  }

  claim(key: string, owner: object): void {
    this.#owners.set(key, owner);
  }

  /** Claims `key` unless another stream holds it; true when `owner` holds it afterwards. */
  claimIfFree(key: string, owner: object): boolean {
    const current = this.#owners.get(key);
    if (current === undefined) this.#owners.set(key, owner);
    return current === undefined || current === owner;
  }

  owns(key: string, owner: object): boolean {
    return this.#owners.get(key) === owner;
  }

  release(key: string, owner: object): void {
    if (this.#owners.get(key) === owner) this.#owners.delete(key);
  }
}
