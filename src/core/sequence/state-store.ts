import type { NumericArray } from "../datatype.ts";
import { cloneTensor, type Tensor, tensorHeldBytes } from "../tensor.ts";

// Where sequences keep their state between requests. The store is an interface so that a
// write-through tier (Redis, for replicas that survive each other's loss) can sit behind
// it later; the in-memory store is the first implementation. State is keyed by a key
// unique to one life of one sequence: an id that ends and starts again gets a new key.

/**
 * A value model code keeps for a sequence (a handler's chat history, a cached id), held in
 * serialised form (the structured-clone format of node:v8): bytes that a store can count,
 * keep and write elsewhere, decoded only by the code that uses it.
 */
export interface SerializedValue {
  readonly serialized: Uint8Array;
}

/** One entry of a sequence's state: a tensor, or a serialised value. */
export type StateEntry = Tensor | SerializedValue;

export function isSerializedValue(entry: StateEntry): entry is SerializedValue {
  return (entry as Partial<SerializedValue>).serialized !== undefined;
}

/**
 * What an entry costs beyond its key's bytes and its data: its slot in the state's map, its
 * key's string and the tensor or value object around the data (250 to 300 bytes of V8's
 * heap for a one-entry map, measured). A handler names its entries as it likes: a key of
 * 4,000,000 characters counted nothing.
 */
const STATE_ENTRY_OVERHEAD = 256;

/**
 * Bytes an entry of a sequence's state holds in memory: its key (UTF-8, at least what V8
 * keeps of it), its data (tensorHeldBytes) and the entry's own overhead. The core's store
 * and a handler's worker count an entry by this one function, so that the worker's check
 * against the room the core gives it and the core's count agree.
 */
export function stateEntryBytes(key: string, entry: StateEntry): number {
  const data = isSerializedValue(entry) ? entry.serialized.byteLength : tensorHeldBytes(entry);
  return Buffer.byteLength(key, "utf8") + STATE_ENTRY_OVERHEAD + data;
}

/**
 * One sequence's state: its implicit-state tensors by state input name (ONNX models), or
 * the entries a handler keeps by its own names (tensors and serialised values).
 */
export type SequenceState = ReadonlyMap<string, StateEntry>;

export interface StateStore {
  /** The sequence's state; the tensors may be views of the store's memory, valid until the next set or delete. */
  get(key: string): SequenceState | undefined;
  /** Keeps `state` for the sequence; the tensors may be views of a batch's output (the store copies what it keeps). */
  set(key: string, state: SequenceState): void;
  delete(key: string): void;
  /** Bytes this store would hold for `state` (what a budget checks before set). */
  bytesFor(state: SequenceState): number;
  /** Bytes held for one sequence (0 when it has none). */
  bytesOf(key: string): number;
  /** Bytes held for every sequence. */
  readonly totalBytes: number;
  /** Bytes reserved for state, held by sequences or not (slabs); at least totalBytes. */
  readonly allocatedBytes: number;
  readonly size: number;
}

/** Bytes a sequence's state holds in memory, every entry counted (stateEntryBytes). */
export function stateBytes(state: SequenceState): number {
  let total = 0;
  for (const [key, entry] of state) total += stateEntryBytes(key, entry);
  return total;
}

/** A view of part of a larger buffer would keep the whole buffer (a batch's output) alive. */
function ownsItsBuffer(entry: StateEntry): boolean {
  if (isSerializedValue(entry)) return true;
  const tensor = entry;
  if (tensor.datatype === "BYTES") return true;
  const data = tensor.data as NumericArray;
  return data.byteOffset === 0 && data.byteLength === data.buffer.byteLength;
}

/** Any state: one map of entries per sequence (growing or variable-shaped state, handler values). */
export class MemoryStateStore implements StateStore {
  readonly #states = new Map<string, { state: SequenceState; bytes: number }>();
  #totalBytes = 0;

  get(key: string): SequenceState | undefined {
    return this.#states.get(key)?.state;
  }

  set(key: string, state: SequenceState): void {
    const owned = new Map<string, StateEntry>();
    for (const [name, entry] of state)
      owned.set(name, ownsItsBuffer(entry) ? entry : cloneTensor(entry as Tensor));
    state = owned;
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

  bytesFor(state: SequenceState): number {
    return stateBytes(state);
  }

  bytesOf(key: string): number {
    return this.#states.get(key)?.bytes ?? 0;
  }

  get totalBytes(): number {
    return this.#totalBytes;
  }

  get allocatedBytes(): number {
    return this.#totalBytes;
  }

  get size(): number {
    return this.#states.size;
  }
}
