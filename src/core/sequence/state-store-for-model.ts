import type { ModelConfig } from "../model-config.ts";
import type { NumericTensor } from "../tensor.ts";
import { SlabStateStore, type StateLayout } from "./slab-state-store.ts";
import { MemoryStateStore, type StateStore } from "./state-store.ts";

// Which store keeps a model's sequence state: slabs of fixed rows when every state tensor
// has a fixed shape per sequence (the common case: recurrent state, Silero VAD, the ONNX
// stateful backend's models), a map of tensors per sequence when any state can grow.

/** The per-sequence layouts of a model's states, or undefined when some state's shape varies. */
export function fixedStateLayouts(
  config: ModelConfig,
  initialStates: ReadonlyMap<string, NumericTensor>,
): StateLayout[] | undefined {
  const sequencing = config.sequenceBatching;
  if (sequencing === undefined) return [];
  const layouts: StateLayout[] = [];
  for (const state of sequencing.states) {
    const fixed = state.dims.every((dim, axis) => axis === state.batchAxis || dim !== -1);
    if (!fixed) return undefined;
    const fp16 = sequencing.storeStatesAsFp16 && state.datatype === "FP32";
    layouts.push({
      inputName: state.inputName,
      datatype: fp16 ? "FP16" : state.datatype,
      shape: initialStates.get(state.inputName)!.shape,
    });
  }
  return layouts;
}

export function stateStoreForModel(
  layouts: readonly StateLayout[] | undefined,
  config: ModelConfig,
  slots: number,
): StateStore {
  const sequencing = config.sequenceBatching;
  if (layouts === undefined || layouts.length === 0 || sequencing === undefined)
    return new MemoryStateStore();
  return new SlabStateStore(layouts, sequencing.stateBuffer, slots);
}
