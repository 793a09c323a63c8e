import { readFileSync } from "node:fs";
import { allocateArray, elementByteSize, viewArray } from "../datatype.ts";
import { internal } from "../errors.ts";
import type { StateConfig } from "../model-config.ts";
import { elementCount, type NumericTensor } from "../tensor.ts";

// The state a sequence starts with: Triton's `initial_state` (zeros, or the first bytes of
// `<model>/initial_state/<data_file>`), or zeros with every variable dim at 1 when none is
// configured. Its shape has 1 on the batch axis: one sequence's share of a batch.

/** Computed once per model load; every START copies from it. */
export function initialStateTensor(state: StateConfig): NumericTensor {
  const initial = state.initialState;
  if (initial === undefined) {
    const shape = state.dims.map((d, axis) => (axis === state.batchAxis || d === -1 ? 1 : d));
    return { datatype: state.datatype, shape, data: allocateArray(state.datatype, elementCount(shape)) };
  }
  const shape = [...initial.dims];
  const count = elementCount(shape);
  if (initial.kind === "zero") {
    return { datatype: state.datatype, shape, data: allocateArray(state.datatype, count) };
  }
  const bytes = readFileSync(initial.path);
  const expected = count * (elementByteSize(state.datatype) ?? 0);
  // As Triton: the file's first bytes; one too small was refused with the config.
  if (bytes.byteLength < expected) {
    throw internal(
      `initial state file '${initial.path}' for state '${state.inputName}' has ${bytes.byteLength} bytes, expected at least ${expected}`,
    );
  }
  const owned = new Uint8Array(bytes.subarray(0, expected));
  return {
    datatype: state.datatype,
    shape,
    data: viewArray(state.datatype, owned.buffer, 0, owned.byteLength),
  };
}
