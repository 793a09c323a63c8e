import type { NamedTensor } from "../../core/infer.ts";
import type { InputConfig, ModelConfig, OutputConfig } from "../../core/model-config.ts";
import type { Tensor } from "../../core/tensor.ts";

// A model's scalars as OVMS shows them. A config in Triton's form cannot give a tensor
// empty dims, so a tensor the model declares with rank 0 (Silero VAD's `sr`, a model's
// scalar score) is configured as one element, dims [1] (or [1, 1], …), reshaped to a
// scalar for the model (config/resolve/io-config.ts). OVMS reads shapes from the model itself: its metadata
// shows such a tensor with no dimensions, a client sends it as a scalar
// (`make_tensor_proto(16000, dtype="int64")` for an int64 one, a bare JSON number) and
// gets it back as one. The TF-Serving frontends do the same; KServe's keep Triton's [1].
// Likewise a tensor the model declares with rank 1, its batch dimension alone (one scalar
// per row, a model's `[-1]`): configured [1] reshaped to [], it is [N, 1] in Triton's
// terms and [N] in OVMS's, in requests, answers and metadata alike.

/** Whether the config's shape of `tensor` is its whole shape: not batched, or shared by a batch. */
function unbatched(config: ModelConfig, tensor: InputConfig | OutputConfig): boolean {
  return config.maxBatchSize === 0 || ("shared" in tensor && tensor.shared === true);
}

/** Whether the model declares `tensor` with rank 0 (and no batch dimension is added to it). */
export function isModelScalar(config: ModelConfig, tensor: InputConfig | OutputConfig): boolean {
  return unbatched(config, tensor) && tensor.reshape?.length === 0 && isOneElement(tensor.dims);
}

/** Whether the model declares `tensor` with its batch dimension alone: one scalar per row. */
export function isRowScalar(config: ModelConfig, tensor: InputConfig | OutputConfig): boolean {
  return !unbatched(config, tensor) && tensor.reshape?.length === 0 && isOneElement(tensor.dims);
}

/** Dims of one element: [1], [1, 1], … */
function isOneElement(dims: readonly number[]): boolean {
  return dims.length > 0 && dims.every((dim) => dim === 1);
}

/**
 * The inputs with a scalar given as a scalar read as the one element their config has:
 * any input configured with one element that gets no batch dimension (not only the
 * model's own scalars), as OVMS takes a scalar for a one-element input; and a row scalar
 * given as [N] read as [N, 1].
 */
export function scalarInputsAsConfigured(
  config: ModelConfig,
  inputs: ReadonlyMap<string, Tensor>,
): ReadonlyMap<string, Tensor> {
  let adjusted: Map<string, Tensor> | undefined;
  for (const [name, tensor] of inputs) {
    if (tensor.shape.length > 1) continue;
    const input = config.inputs.find((i) => i.name === name);
    if (input === undefined || !isOneElement(input.dims)) continue;
    let shape: number[];
    if (tensor.shape.length === 0 && unbatched(config, input)) shape = [...input.dims];
    else if (tensor.shape.length === 1 && isRowScalar(config, input))
      shape = [tensor.shape[0]!, ...input.dims];
    else continue;
    adjusted ??= new Map(inputs);
    adjusted.set(name, { ...tensor, shape } as Tensor);
  }
  return adjusted ?? inputs;
}

/**
 * The outputs with the model's scalars answered as scalars, and its row scalars as [N]
 * (column form and gRPC; `rows`, the row form, keeps a whole-request scalar as [1], since
 * TF-Serving's row writer refuses a tensor without dimensions, and gives each row's
 * scalar bare).
 */
export function scalarOutputsAsModel(
  config: ModelConfig,
  outputs: readonly NamedTensor[],
  rows = false,
): readonly NamedTensor[] {
  let adjusted: NamedTensor[] | undefined;
  outputs.forEach((tensor, i) => {
    const output = config.outputs.find((o) => o.name === tensor.name);
    if (output === undefined) return;
    let shape: number[];
    if (!rows && isModelScalar(config, output) && tensor.shape.length > 0) shape = [];
    else if (isRowScalar(config, output) && tensor.shape.length === 1 + output.dims.length)
      shape = [tensor.shape[0]!];
    else return;
    adjusted ??= [...outputs];
    adjusted[i] = { ...tensor, shape } as NamedTensor;
  });
  return adjusted ?? outputs;
}
