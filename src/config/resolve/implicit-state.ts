import { statSync } from "node:fs";
import { resolve } from "node:path";
import {
  configTypeName,
  elementByteSize,
  fromConfigTypeName,
  type NumericDataType,
} from "../../core/datatype.ts";
import type { InitialState, StateConfig } from "../../core/model-config.ts";
import type { ModelIo, ModelTensorInfo } from "../../core/model-io.ts";
import { formatShapeSpaced, type MessageNode } from "./config-node.ts";
import { fileInFolder } from "./file-in-folder.ts";
import type { ModelParameters } from "./model-parameters.ts";
import { checkAgainstModel, checkDims } from "./tensor-shapes.ts";

// Implicit state, the two ways configs declare it:
// - Triton's `sequence_batching { state [...] }`: dims without the batch dimension, which
//   is axis 0 when max_batch_size > 0; an optional initial_state (zeros or a file in the
//   model's initial_state folder).
// - The ONNX stateful backend's `state_pairs` parameter: only tensor names; type and shape
//   come from the model file, and the batch axis is the state's one variable dimension
//   (Silero VAD's [2, -1, 128] batches on axis 1).

export interface StateContext {
  readonly sequence: MessageNode;
  readonly params: ModelParameters;
  readonly modelIo: ModelIo | undefined;
  readonly maxBatchSize: number;
  /** Names listed in `input`: a state input must not be one of them. */
  readonly inputNames: ReadonlySet<string>;
  readonly modelDir: string;
}

function numericType(node: MessageNode, field: string, what: string): NumericDataType {
  const typeName = node.string(field, "TYPE_INVALID");
  const datatype = fromConfigTypeName(typeName);
  if (datatype === undefined) node.fail(field, `${what} must specify 'data_type'`);
  if (datatype === "BYTES")
    node.fail(field, `${what} has data_type TYPE_STRING; seqserve keeps numeric state only`);
  return datatype;
}

function modelTensor(tensors: readonly ModelTensorInfo[], name: string): ModelTensorInfo | undefined {
  return tensors.find((t) => t.name === name);
}

/** Triton-style `state` entries. */
function tritonStates(ctx: StateContext): StateConfig[] {
  const { sequence, modelIo, maxBatchSize } = ctx;
  const modelName = sequence.ctx.modelName;
  const batched = maxBatchSize > 0;
  return sequence.children("state").map((node: MessageNode): StateConfig => {
    const inputName = node.string("input_name");
    const outputName = node.string("output_name");
    if (inputName === "") node.fail("input_name", `state of model '${modelName}' must specify 'input_name'`);
    if (outputName === "")
      node.fail("output_name", `state '${inputName}' of model '${modelName}' must specify 'output_name'`);
    const what = `state '${inputName}' of model '${modelName}'`;
    if (ctx.inputNames.has(inputName)) {
      node.fail(
        "input_name",
        `state input '${inputName}' of model '${modelName}' must not also be listed in 'input'`,
      );
    }
    const datatype = numericType(node, "data_type", what);

    const input = modelIo === undefined ? undefined : modelTensor(modelIo.inputs, inputName);
    const output = modelIo === undefined ? undefined : modelTensor(modelIo.outputs, outputName);
    if (modelIo !== undefined) {
      if (input === undefined)
        node.fail("input_name", `state input '${inputName}' is not an input of model '${modelName}'`);
      if (output === undefined)
        node.fail("output_name", `state output '${outputName}' is not an output of model '${modelName}'`);
      for (const tensor of [input, output]) {
        if (tensor.datatype !== datatype) {
          node.fail(
            "data_type",
            `${what} has data_type ${configTypeName(datatype)}, but the model's '${tensor.name}' is ${tensor.typeName}`,
          );
        }
      }
      if (!node.has("dims") && input.shape !== undefined) {
        node.set("dims", (batched ? input.shape.slice(1) : input.shape).map(BigInt));
      }
    }
    if (!node.has("dims")) node.fail(undefined, `${what} must specify 'dims'`);
    const dims = node.safeNumbers("dims");
    checkDims(node, "dims", dims, what);
    for (const tensor of [input, output]) {
      if (tensor?.shape !== undefined) {
        checkAgainstModel(node, "dims", `state tensor '${tensor.name}'`, tensor.shape, dims, batched);
      }
    }
    noteDeviceBufferFields(node, inputName, modelName);
    const batchAxis = batched ? 0 : undefined;
    const initialState = resolveInitialState(ctx, node, inputName, datatype, dims, batchAxis);
    return {
      inputName,
      outputName,
      datatype,
      dims: batched ? [-1, ...dims] : dims,
      batchAxis,
      ...(initialState === undefined ? {} : { initialState }),
    };
  });
}

/**
 * Triton's choices of GPU buffers for a state (CUDA virtual memory that grows in place; one
 * buffer for input and output): seqserve keeps every state in host memory, and keeps
 * whatever the model gives back, grown or not, as the next step's state.
 */
function noteDeviceBufferFields(node: MessageNode, inputName: string, modelName: string): void {
  for (const field of ["use_growable_memory", "use_same_buffer_for_input_output"]) {
    if (node.bool(field)) {
      node.ctx.note(
        `${field} of state '${inputName}' of model '${modelName}' has no effect here: seqserve keeps the state in host memory and takes it as the model outputs it, grown or not`,
      );
    }
  }
}

function resolveInitialState(
  ctx: StateContext,
  state: MessageNode,
  inputName: string,
  datatype: NumericDataType,
  stateDims: readonly number[],
  batchAxis: number | undefined,
): InitialState | undefined {
  const entries = state.children("initial_state");
  if (entries.length === 0) return undefined;
  if (entries.length > 1) {
    state.failItem(
      "initial_state",
      1,
      `initial_state field for state input '${inputName}' must contain exactly one or zero element. Found '${entries.length}' elements.`,
    );
  }
  const node = entries[0]!;
  if (node.string("data_type", "TYPE_INVALID") !== configTypeName(datatype)) {
    node.fail(
      "data_type",
      `The data type used for 'initial_state' field of state '${inputName}' does not match the state data type.`,
    );
  }
  if (node.string("name") === "") {
    node.fail("name", `Field 'name' must be set when using initial_state for state input '${inputName}'.`);
  }
  // Triton's checks, in its order and words (sequence_batch_scheduler.cc).
  const dims = node.safeNumbers("dims");
  if (dims.length !== stateDims.length) {
    node.fail(
      "dims",
      `Number of dimensions in 'initial_state' doesn't match the size of 'state' dimensions for state input '${inputName}'. ${dims.length} != ${stateDims.length}`,
    );
  }
  dims.forEach((dim, i) => {
    if (dim === -1) {
      node.fail(
        "dims",
        `'initial_state' field for state input name '${inputName}' contains variable dimensions.`,
      );
    }
    if (dim < 1) {
      node.fail(
        "dims",
        `Field 'dims' must be fully specified when using initial_state for state input '${inputName}'.`,
      );
    }
    const stateDim = stateDims[i]!;
    if (stateDim !== -1 && dim !== stateDim) {
      node.fail(
        "dims",
        `'initial_state' dim for input name '${inputName}' doesn't match 'state' dim description. ${dim} != ${stateDim}`,
      );
    }
  });
  // The state one sequence keeps: the batch axis, when there is one, has size 1.
  const perSequence =
    batchAxis === undefined ? dims : [...dims.slice(0, batchAxis), 1, ...dims.slice(batchAxis)];
  if (node.has("zero_data")) return { kind: "zero", datatype, dims: perSequence };
  if (!node.has("data_file")) {
    node.fail(undefined, `initial_state of state '${inputName}' must set 'zero_data' or 'data_file'`);
  }
  const file = node.string("data_file");
  const path = fileInFolder(resolve(ctx.modelDir, "initial_state"), file);
  if (path === undefined) {
    return node.fail(
      "data_file",
      `initial_state data_file '${file}' of state '${inputName}' must name a file in the model's initial_state folder`,
    );
  }
  let size: number;
  try {
    size = statSync(path).size;
  } catch (error) {
    return node.fail("data_file", `failed to open text file for read ${path}: ${systemErrorText(error)}`);
  }
  // As Triton: a file larger than the state gives its first bytes; only one too small is
  // refused. (Triton's message has no space before "only".)
  const expected = dims.reduce((a, b) => a * b, 1) * (elementByteSize(datatype) ?? 0);
  if (size < expected) {
    node.fail(
      "data_file",
      `initial_state setting expects ${expected} bytes, but the data provided from ${file}only has ${size} bytes.`,
    );
  }
  return { kind: "file", datatype, dims: perSequence, path };
}

/** An error's text as the C library's strerror gives it (Triton's message quotes it). */
function systemErrorText(error: unknown): string {
  const code = (error as NodeJS.ErrnoException).code;
  const texts: Record<string, string> = {
    ENOENT: "No such file or directory",
    EACCES: "Permission denied",
    ENOTDIR: "Not a directory",
  };
  return (code === undefined ? undefined : texts[code]) ?? (error as Error).message;
}

/** States named by the `state_pairs` parameter; their type and shape come from the model file. */
function pairedStates(ctx: StateContext): StateConfig[] {
  const params: ModelParameters = ctx.params;
  const { modelIo, maxBatchSize } = ctx;
  const modelName = ctx.sequence.ctx.modelName;
  const key = "state_pairs";
  return params.statePairs().map(({ input: inputName, output: outputName }): StateConfig => {
    if (modelIo === undefined) {
      return params.fail(
        key,
        `state '${inputName}' of parameter 'state_pairs' takes its type and shape from the model file, which has not been read`,
      );
    }
    const input = modelTensor(modelIo.inputs, inputName);
    const output = modelTensor(modelIo.outputs, outputName);
    if (input === undefined)
      params.fail(
        key,
        `${params.statePairsOrigin} names '${inputName}', which is not an input of model '${modelName}'`,
      );
    if (output === undefined)
      params.fail(
        key,
        `${params.statePairsOrigin} names '${outputName}', which is not an output of model '${modelName}'`,
      );
    if (ctx.inputNames.has(inputName)) {
      params.fail(
        key,
        `state input '${inputName}' of model '${modelName}' must not also be listed in 'input'`,
      );
    }
    for (const tensor of [input, output]) {
      if (tensor.datatype === undefined) {
        params.fail(
          key,
          `state tensor '${tensor.name}' of model '${modelName}' has type ${tensor.typeName}, which seqserve cannot hold`,
        );
      }
      if (tensor.datatype === "BYTES")
        params.fail(
          key,
          `state tensor '${tensor.name}' of model '${modelName}' is a string tensor; seqserve keeps numeric state only`,
        );
      if (tensor.shape === undefined)
        params.fail(key, `state tensor '${tensor.name}' of model '${modelName}' has no declared rank`);
    }
    const datatype = input.datatype as NumericDataType;
    const shape = input.shape!;
    if (output.datatype !== datatype) {
      params.fail(
        key,
        `state '${inputName}' of model '${modelName}' is ${input.typeName}, but its output '${outputName}' is ${output.typeName}`,
      );
    }
    const outputShape = output.shape!;
    const sameShape =
      outputShape.length === shape.length &&
      outputShape.every((dim, i) => dim === -1 || shape[i] === -1 || dim === shape[i]);
    if (!sameShape) {
      params.fail(
        key,
        `state '${inputName}' of model '${modelName}' has shape ${formatShapeSpaced(shape)}, but its output '${outputName}' has ${formatShapeSpaced(outputShape)}`,
      );
    }
    let batchAxis: number | undefined;
    if (maxBatchSize > 0) {
      const variable = shape.flatMap((dim, i) => (dim === -1 ? [i] : []));
      if (variable.length !== 1) {
        params.fail(
          key,
          `state '${inputName}' of model '${modelName}' must have exactly one variable dimension, its batch axis, ` +
            `but its shape is ${formatShapeSpaced(shape)}`,
        );
      }
      batchAxis = variable[0];
    }
    return { inputName, outputName, datatype, dims: [...shape], batchAxis };
  });
}

/** Every implicit state of the model, checked for duplicates. */
export function resolveStates(ctx: StateContext): StateConfig[] {
  const states = [...tritonStates(ctx), ...pairedStates(ctx)];
  const modelName = ctx.sequence.ctx.modelName;
  const inputs = new Set<string>();
  const outputs = new Set<string>();
  for (const state of states) {
    if (inputs.has(state.inputName)) {
      ctx.sequence.fail(
        "state",
        `state input '${state.inputName}' of model '${modelName}' is declared twice`,
      );
    }
    if (outputs.has(state.outputName)) {
      ctx.sequence.fail(
        "state",
        `state output '${state.outputName}' of model '${modelName}' is declared twice`,
      );
    }
    inputs.add(state.inputName);
    outputs.add(state.outputName);
  }
  return states;
}
