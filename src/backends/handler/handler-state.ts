import { deserialize, serialize } from "node:v8";
import type { NumericArray } from "../../core/datatype.ts";
import { stateEntryBytes } from "../../core/sequence/state-store.ts";
import type { SequenceState } from "../../handler-api.ts";
import {
  fromWire,
  type PackedBytes,
  toWire,
  transferableArray,
  type WireTensor,
} from "../worker/wire-tensor.ts";
import { uncopyableText } from "./clone-failure.ts";
import type { WireStateEntry } from "./handler-messages.ts";
import { checkTensor, looksLikeTensor } from "./handler-tensor.ts";

// A sequence's state as a handler sees it during one request. Entries arrive from the
// core (tensors as they are, values serialised); a value is decoded when first read, and
// only entries set during the request are encoded again, so an unchanged large entry
// costs nothing. The entries as they arrived are kept: a failed request gives them back.
// A handler may change a tensor it read in place, so a tensor's data is copied aside the
// first time it is read (one copy per tensor read, none for the others); a serialised
// value is decoded into a new object and its bytes stay as they arrived.
//
// What goes back is transferred, not copied, once the handler's execute() has returned.
// A request can be done before that (cancelled, timed out, completed by a decoupled
// model): its handler may still read the state, so what goes back then is a copy (a
// transfer would detach the buffers under it, and a read fail the whole batch).

/** What a handler did with its state after the request was complete. */
export type LateUse = "change" | "read";

interface Entry {
  /** As it arrived (undefined: set during this request). */
  readonly wire: WireStateEntry | undefined;
  /** Decoded or set value; `decoded` says whether it is known. */
  value: unknown;
  decoded: boolean;
  changed: boolean;
}

export class HandlerSequenceState implements SequenceState {
  readonly #entries = new Map<string, Entry>();
  readonly #original: readonly WireStateEntry[];
  /** Copies of the tensors read, as they arrived; undefined when nothing is given back. */
  readonly #untouched: Map<string, WireStateEntry> | undefined;
  #sealed: ((key: string, late: LateUse) => void) | undefined;
  #warned = false;

  /** `rollback`: whether original() may be asked for (not for a sequence that has ended). */
  constructor(entries: readonly WireStateEntry[], rollback = true) {
    this.#original = entries;
    this.#untouched = rollback ? new Map() : undefined;
    for (const wire of entries)
      this.#entries.set(wire.key, { wire, value: undefined, decoded: false, changed: false });
  }

  get<T = unknown>(key: string): T | undefined {
    const entry = this.#entries.get(key);
    if (entry === undefined) return undefined;
    if (!entry.decoded) {
      const wire = entry.wire!;
      // Read after its request was complete (from a timer): the entry went back with it.
      if (this.#sealed !== undefined && handedOver(wire)) {
        this.#open(key, "read");
        return undefined;
      }
      if ("serialized" in wire) entry.value = deserialize(wire.serialized);
      else {
        this.#untouched?.set(key, { key, tensor: copyTensor(wire.tensor) });
        entry.value = fromWire(wire.tensor);
      }
      entry.decoded = true;
    }
    return entry.value as T;
  }

  /**
   * After this, a change is left undone, and so is a read of an entry that went back with
   * the request, and `warn` is told once: the request it belonged to is complete. Not
   * thrown: it may come from a timer or a detached task, where an exception would end the
   * worker and every sequence on it.
   */
  seal(warn: (key: string, late: LateUse) => void): void {
    this.#sealed = warn;
  }

  /** Whether a change may be made (it is told once when it may not). */
  #open(key: string, late: LateUse = "change"): boolean {
    const warn = this.#sealed;
    if (warn === undefined) return true;
    if (!this.#warned) {
      this.#warned = true;
      warn(key, late);
    }
    return false;
  }

  set(key: string, value: unknown): void {
    if (!this.#open(key)) return;
    if (value === undefined) {
      this.delete(key);
      return;
    }
    const entry = this.#entries.get(key);
    if (entry === undefined) this.#entries.set(key, { wire: undefined, value, decoded: true, changed: true });
    else {
      entry.value = value;
      entry.decoded = true;
      entry.changed = true;
    }
  }

  has(key: string): boolean {
    return this.#entries.has(key);
  }

  delete(key: string): boolean {
    if (!this.#open(key)) return false;
    return this.#entries.delete(key);
  }

  clear(): void {
    if (!this.#open("*")) return;
    this.#entries.clear();
  }

  keys(): string[] {
    return [...this.#entries.keys()];
  }

  get size(): number {
    return this.#entries.size;
  }

  /**
   * The entries as they arrived: what a failed request leaves. `copy`: the handler may
   * still read them (its execute() has not returned).
   */
  original(transfer: ArrayBuffer[], copy: boolean): WireStateEntry[] {
    return this.#original.map((wire) => {
      const untouched = this.#untouched?.get(wire.key);
      // A tensor's copy set aside when it was read is the handler's no more.
      return retransfer(untouched ?? (copy ? copyEntry(wire) : wire), transfer);
    });
  }

  /**
   * The entries after the request, encoded, and the bytes they hold. Throws when a value
   * cannot be kept (not a tensor and not structured-clonable). `copy`: as original()'s.
   */
  result(transfer: ArrayBuffer[], copy: boolean): { entries: WireStateEntry[]; bytes: number } {
    const entries: WireStateEntry[] = [];
    let bytes = 0;
    for (const [key, entry] of this.#entries) {
      let wire: WireStateEntry;
      if (!entry.changed) wire = copy ? copyEntry(entry.wire!) : entry.wire!;
      else if (looksLikeTensor(entry.value)) {
        const tensor = checkTensor(`state '${key}'`, entry.value);
        wire = { key, tensor: toWire(key, tensor, []) };
        if (copy) wire = copyEntry(wire);
      } else {
        let serialized: Buffer;
        try {
          serialized = serialize(entry.value);
        } catch (error) {
          throw new Error(`state '${key}' cannot be kept: ${uncopyableText(entry.value, error)}`);
        }
        wire = {
          key,
          serialized: new Uint8Array(serialized.buffer, serialized.byteOffset, serialized.byteLength),
        };
      }
      // Counted as the core's store will hold it (state-store.ts), key and all.
      bytes += stateEntryBytes(key, "serialized" in wire ? wire : fromWire(wire.tensor));
      entries.push(wire);
    }
    return { entries: entries.map((wire) => retransfer(wire, transfer)), bytes };
  }
}

/**
 * A copy of what a handler can change of a tensor it read: its shape and its data (for
 * BYTES the packed bytes, of which it sees views; never the offsets).
 */
function copyTensor(tensor: WireTensor): WireTensor {
  const { name, datatype } = tensor;
  const shape = [...tensor.shape];
  if (datatype !== "BYTES") return { name, datatype, shape, data: (tensor.data as NumericArray).slice() };
  const packed = tensor.data as PackedBytes;
  return { name, datatype, shape, data: { offsets: packed.offsets, bytes: packed.bytes.slice() } };
}

function copyEntry(wire: WireStateEntry): WireStateEntry {
  if ("serialized" in wire) return { key: wire.key, serialized: wire.serialized.slice() };
  return { key: wire.key, tensor: copyTensor(wire.tensor) };
}

/** Whether the entry's bytes were transferred away (a detached buffer reads as empty). */
function handedOver(wire: WireStateEntry): boolean {
  const view =
    "serialized" in wire
      ? wire.serialized
      : wire.tensor.datatype === "BYTES"
        ? (wire.tensor.data as PackedBytes).bytes
        : (wire.tensor.data as NumericArray);
  return view.buffer.byteLength === 0;
}

/** The entry ready to post: its buffers in `transfer` (copied when they are views of something larger). */
function retransfer(wire: WireStateEntry, transfer: ArrayBuffer[]): WireStateEntry {
  if ("serialized" in wire) {
    return { key: wire.key, serialized: transferableArray(wire.serialized, transfer) as Uint8Array };
  }
  return { key: wire.key, tensor: toWire(wire.key, fromWire(wire.tensor), transfer) };
}
