import { isSerializedValue, type SequenceState, type StateEntry } from "../../core/sequence/state-store.ts";
import { fromWire, toWire, transferableArray } from "../worker/wire-tensor.ts";
import type { WireStateEntry } from "./handler-messages.ts";

// A sequence's state between the core's store and a handler worker: moved, not copied
// (its buffers are transferred both ways), so a large cached tensor costs nothing per step.

export function stateToWire(state: SequenceState | undefined, transfer: ArrayBuffer[]): WireStateEntry[] {
  const entries: WireStateEntry[] = [];
  if (state === undefined) return entries;
  for (const [key, entry] of state) entries.push(entryToWire(key, entry, transfer));
  return entries;
}

function entryToWire(key: string, entry: StateEntry, transfer: ArrayBuffer[]): WireStateEntry {
  if (isSerializedValue(entry)) {
    return { key, serialized: transferableArray(entry.serialized, transfer) as Uint8Array };
  }
  return { key, tensor: toWire(key, entry, transfer) };
}

export function stateFromWire(entries: readonly WireStateEntry[] | undefined): SequenceState | undefined {
  if (entries === undefined) return undefined;
  const state = new Map<string, StateEntry>();
  for (const entry of entries) {
    state.set(entry.key, "serialized" in entry ? { serialized: entry.serialized } : fromWire(entry.tensor));
  }
  return state;
}
