import { type Tensor, tensorByteLength } from "../tensor.ts";

// Where sequences keep their state between requests. The store is an interface so that a
// write-through tier (Redis, for replicas that survive each other's loss) can sit behind
// it later; the in-memory store is the first implementation. State is keyed by a key
// unique to one life of one sequence: an id that ends and starts again gets a new key.

/** One sequence's state: its implicit-state tensors by state input name. */
export type SequenceState = ReadonlyMap<string, Tensor>;

export interface StateStore {
  get(key: string): SequenceState | undefined;
  set(key: string, state: SequenceState): void;
  delete(key: string): void;
  /** Bytes held for one sequence (0 when it has none). */
  bytesOf(key: string): number;
  /** Bytes held for every sequence. */
  readonly totalBytes: number;
  readonly size: number;
}

function stateBytes(state: SequenceState): number {
  let total = 0;
  for (const tensor of state.values()) total += tensorByteLength(tensor);
  return total;
}

export class MemoryStateStore implements StateStore {
  readonly #states = new Map<string, { state: SequenceState; bytes: number }>();
  #totalBytes = 0;

  get(key: string): SequenceState | undefined {
    return this.#states.get(key)?.state;
  }

  set(key: string, state: SequenceState): void {
    const bytes = stateBytes(state);
    const previous = this.#states.get(key);
    this.#totalBytes += bytes - (previous?.bytes ?? 0);
    this.#states.set(key, { state, bytes });
  }

  delete(key: string): void {
    const previous = this.#states.get(key);
    if (previous === undefined) return;
    this.#totalBytes -= previous.bytes;
    this.#states.delete(key);
  }

  bytesOf(key: string): number {
    return this.#states.get(key)?.bytes ?? 0;
  }

  get totalBytes(): number {
    return this.#totalBytes;
  }

  get size(): number {
    return this.#states.size;
  }
}
