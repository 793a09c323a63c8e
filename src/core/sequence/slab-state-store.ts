import { allocateArray, type NumericArray, type NumericDataType } from "../datatype.ts";
import { internal } from "../errors.ts";
import type { StateBufferConfig } from "../model-config.ts";
import { elementCount, type Tensor } from "../tensor.ts";
import { MemoryStateStore, type SequenceState, type StateStore } from "./state-store.ts";

// State kept in slabs: every state tensor of a sequence has the same fixed shape, so one
// row per sequence in a few large typed arrays holds it with no per-sequence objects, and
// memory grows and shrinks a slab at a time as sequences come and go (the ONNX stateful
// backend's lazy buffer allocation). Reading a sequence's state gives views of its row;
// writing copies into it.
//
// The shapes are the config's, and a model may give its state back in another one (a
// state that grows each step, as Triton's growable-memory models do, whatever dims the
// config gives): Triton keeps what the model gave as the next step's state. Such a
// sequence leaves its row for a map of its own tensors (MemoryStateStore), and comes back
// to a row if its state takes the config's shapes again.

/** One state tensor as a sequence keeps it. */
export interface StateLayout {
  readonly inputName: string;
  /** As stored (FP16 for FP32 state kept as FP16). */
  readonly datatype: NumericDataType;
  /** One sequence's share: 1 on the batch axis. */
  readonly shape: readonly number[];
}

/** Bytes one sequence's state takes in slabs of these layouts. */
export function stateRowBytes(layouts: readonly StateLayout[]): number {
  return layouts.reduce(
    (sum, l) => sum + elementCount(l.shape) * allocateArray(l.datatype, 0).BYTES_PER_ELEMENT,
    0,
  );
}

interface Slab {
  readonly rows: number;
  /** Per layout: rows × elements. */
  readonly arrays: NumericArray[];
  /** Free row numbers (the last is taken next). Rows are taken from the first slab with room, so later slabs empty first. */
  readonly free: number[];
}

interface Place {
  readonly slab: Slab;
  readonly row: number;
}

export class SlabStateStore implements StateStore {
  readonly #layouts: readonly StateLayout[];
  readonly #elements: readonly number[];
  readonly #rowBytes: number;
  readonly #policy: StateBufferConfig;
  /** Rows the store plans for (the model's sequence slots); the last slab is cut to fit. */
  readonly #plannedRows: number;
  readonly #slabs: Slab[] = [];
  readonly #places = new Map<string, Place>();
  /** Sequences whose state the model gave in other shapes than the rows'. */
  readonly #outgrown = new MemoryStateStore();
  #allocatedRows = 0;

  constructor(layouts: readonly StateLayout[], policy: StateBufferConfig, plannedRows: number) {
    this.#layouts = layouts;
    this.#elements = layouts.map((l) => elementCount(l.shape));
    this.#rowBytes = stateRowBytes(layouts);
    this.#policy = policy;
    this.#plannedRows = Math.max(1, plannedRows);
    if (policy.initialRows > 0) this.#grow(Math.min(policy.initialRows, this.#plannedRows));
  }

  /** Slabs hold tensors only. */
  get(key: string): ReadonlyMap<string, Tensor> | undefined {
    const place = this.#places.get(key);
    if (place === undefined) return this.#outgrown.get(key) as ReadonlyMap<string, Tensor> | undefined;
    const state = new Map<string, Tensor>();
    for (let i = 0; i < this.#layouts.length; i++) {
      const layout = this.#layouts[i]!;
      const n = this.#elements[i]!;
      state.set(layout.inputName, {
        datatype: layout.datatype,
        shape: layout.shape,
        data: place.slab.arrays[i]!.subarray(place.row * n, (place.row + 1) * n),
      });
    }
    return state;
  }

  set(key: string, state: SequenceState): void {
    // Checked before taking a row: a state that cannot be kept leaves the store as it was.
    this.#checkTypes(state);
    if (!this.#fitsRow(state)) {
      this.#leaveRow(key);
      this.#outgrown.set(key, state);
      return;
    }
    this.#outgrown.delete(key);
    const place = this.#places.get(key) ?? this.#take(key);
    for (let i = 0; i < this.#layouts.length; i++) {
      const data = (state.get(this.#layouts[i]!.inputName) as Tensor).data as NumericArray;
      const target = place.slab.arrays[i]!;
      const n = this.#elements[i]!;
      // Reading a row and writing it back (a migration) is a copy onto itself: skip it.
      if (
        data.buffer !== target.buffer ||
        data.byteOffset !== target.byteOffset + place.row * n * target.BYTES_PER_ELEMENT
      ) {
        (target as Float32Array).set(data as Float32Array, place.row * n);
      }
    }
  }

  delete(key: string): void {
    this.#leaveRow(key);
    this.#outgrown.delete(key);
  }

  /** A row for a state of the row's shapes; one the model gave in others is held apart, as it is. */
  bytesFor(state: SequenceState): number {
    return this.#fitsRow(state) ? this.#rowBytes : this.#outgrown.bytesFor(state);
  }

  /**
   * Slabs keep implicit-state tensors only (models whose config gives every state a fixed
   * shape), of the config's types: a state missing one, or of another type, is not kept.
   */
  #checkTypes(state: SequenceState): void {
    for (const layout of this.#layouts) {
      const tensor = state.get(layout.inputName) as Tensor | undefined;
      if (tensor === undefined || tensor.datatype !== layout.datatype) {
        throw internal(
          `state '${layout.inputName}' must be ${layout.datatype} to be kept, ` +
            `got ${tensor === undefined ? "none" : tensor.datatype}`,
        );
      }
    }
  }

  /** Whether `state` fits a row: every tensor of the rows' type and shape. */
  #fitsRow(state: SequenceState): boolean {
    for (let i = 0; i < this.#layouts.length; i++) {
      const layout = this.#layouts[i]!;
      const tensor = state.get(layout.inputName) as Tensor | undefined;
      if (tensor === undefined || tensor.datatype !== layout.datatype) return false;
      if (!sameShape(tensor.shape, layout.shape) || !sameSize(tensor, this.#elements[i]!)) return false;
    }
    return true;
  }

  bytesOf(key: string): number {
    return this.#places.has(key) ? this.#rowBytes : this.#outgrown.bytesOf(key);
  }

  get totalBytes(): number {
    return this.#places.size * this.#rowBytes + this.#outgrown.totalBytes;
  }

  get allocatedBytes(): number {
    return this.#allocatedRows * this.#rowBytes + this.#outgrown.allocatedBytes;
  }

  get size(): number {
    return this.#places.size + this.#outgrown.size;
  }

  /**
   * Whether the sequence's state has the rows' shapes (it has none kept, or a row): such
   * sequences share batches whatever their state; one the model grew batches by its shapes.
   */
  laidOut(key: string): boolean {
    return this.#outgrown.get(key) === undefined;
  }

  /** Slabs held now (for tests and the sequences API). */
  get slabs(): number {
    return this.#slabs.length;
  }

  #leaveRow(key: string): void {
    const place = this.#places.get(key);
    if (place === undefined) return;
    this.#places.delete(key);
    place.slab.free.push(place.row);
    this.#shrink();
  }

  get #freeRows(): number {
    return this.#allocatedRows - this.#places.size;
  }

  #take(key: string): Place {
    let slab = this.#slabs.find((s) => s.free.length > 0);
    if (slab === undefined) slab = this.#grow(this.#nextSlabRows());
    const place = { slab, row: slab.free.pop()! };
    this.#places.set(key, place);
    // Grow ahead of need, as the backend does, so a burst of starts does not wait on allocation.
    if (this.#freeRows < this.#policy.allocThreshold && this.#allocatedRows < this.#plannedRows) {
      this.#grow(this.#nextSlabRows());
    }
    return place;
  }

  #nextSlabRows(): number {
    const room = this.#plannedRows - this.#allocatedRows;
    const rows = Math.max(1, this.#policy.subsequentRows);
    // Beyond the planned rows (never expected: a sequence holds a slot while it has state) grow anyway.
    return room > 0 ? Math.min(rows, room) : rows;
  }

  #grow(rows: number): Slab {
    const slab: Slab = {
      rows,
      arrays: this.#layouts.map((l, i) => allocateArray(l.datatype, rows * this.#elements[i]!)),
      free: Array.from({ length: rows }, (_, i) => rows - 1 - i),
    };
    this.#slabs.push(slab);
    this.#allocatedRows += rows;
    return slab;
  }

  /** Releases the last slab while it is empty and more than the threshold of rows is free. */
  #shrink(): void {
    while (this.#slabs.length > 1) {
      const last = this.#slabs[this.#slabs.length - 1]!;
      if (last.free.length !== last.rows || this.#freeRows <= this.#policy.deallocThreshold) return;
      this.#slabs.pop();
      this.#allocatedRows -= last.rows;
    }
  }
}

function sameShape(a: readonly number[], b: readonly number[]): boolean {
  return a.length === b.length && a.every((dim, i) => dim === b[i]);
}

function sameSize(tensor: Tensor, elements: number): boolean {
  return (tensor.data as NumericArray).length === elements;
}
