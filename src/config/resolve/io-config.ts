import { configTypeName, type DataType, fromConfigTypeName } from "../../core/datatype.ts";
import type { InputConfig, OutputConfig } from "../../core/model-config.ts";
import type { ModelIo, ModelTensorInfo } from "../../core/model-io.ts";
import type { ParsedMessage } from "../parsed-config.ts";
import { formatShapeSpaced, type MessageNode } from "./config-node.ts";
import { namesFileInside } from "./file-in-folder.ts";
import { checkAgainstModel, checkDims, checkReshape } from "./tensor-shapes.ts";

// The model's inputs and outputs: completed from the model file when the config leaves
// them out (Triton's ONNX Runtime autocomplete), validated with Triton's rules, and
// checked against the model file. seqserve adds shared inputs: unbatched inputs whose
// one value serves the whole batch (declared in `shared_inputs`, or recognised when the
// model gives the input no room for a batch dimension).

/** Triton's --backend-config=default-max-batch-size, used when autocomplete finds a batchable model. */
export const DEFAULT_MAX_BATCH_SIZE = 4;

export interface IoContext {
  readonly root: MessageNode;
  readonly modelIo: ModelIo | undefined;
  readonly strict: boolean;
  /** Model inputs the sequence batcher feeds: control tensors and state inputs. */
  readonly sequenceInputs: ReadonlySet<string>;
  /** Model outputs that carry state. */
  readonly stateOutputs: ReadonlySet<string>;
  /** Tensors of `state_pairs`, whose batch axis is their single variable dimension. */
  readonly statePairTensors: ReadonlySet<string>;
  /** Inputs named in the `shared_inputs` parameter. */
  readonly declaredShared: ReadonlySet<string>;
  /** The ONNX stateful backend's convention: a -1 in dims marks the batch dimension. */
  readonly batchMarkedInDims: boolean;
  /** Triton's --backend-config default-max-batch-size, for autocomplete. */
  readonly defaultMaxBatchSize: number;
}

type Kind = "input" | "output";

function unservable(io: IoContext, kind: Kind, tensor: ModelTensorInfo): never {
  return io.root.fail(
    kind,
    // Not "no KServe datatype": KServe has BF16, yet a bfloat16 model lands here because
    // onnxruntime-node has no bfloat16 tensor. Say what actually stops it.
    `${kind} '${tensor.name}' of model '${io.root.ctx.modelName}' has type ${tensor.typeName}, ` +
      "which ONNX Runtime's Node.js API cannot feed or fetch as any KServe datatype, so seqserve cannot serve this model",
  );
}

/** Triton's test: every input and output has a variable first dimension (state and shared tensors aside). */
function supportsBatching(io: IoContext, modelIo: ModelIo): boolean {
  for (const tensor of [...modelIo.inputs, ...modelIo.outputs]) {
    if (io.declaredShared.has(tensor.name)) continue;
    const shape = tensor.shape;
    if (shape === undefined) return false;
    if (io.statePairTensors.has(tensor.name)) {
      // A state's batch axis is its input's one variable dimension; models often leave
      // the output's dimensions all variable (Silero VAD's stateN is [-1,-1,-1]).
      const isInput = modelIo.inputs.includes(tensor);
      if (isInput && shape.filter((dim) => dim === -1).length !== 1) return false;
      continue;
    }
    if (shape.length === 0 || shape[0] !== -1) return false;
  }
  return true;
}

/** A config entry describing `tensor` the way Triton's ONNX Runtime autocomplete writes it. */
function entryFor(io: IoContext, kind: Kind, tensor: ModelTensorInfo, maxBatchSize: number): ParsedMessage {
  if (tensor.datatype === undefined) unservable(io, kind, tensor);
  if (tensor.shape === undefined) {
    io.root.fail(
      kind,
      `cannot complete ${kind} '${tensor.name}' of model '${io.root.ctx.modelName}': the model does not declare its rank`,
    );
  }
  const batched = maxBatchSize > 0 && !io.declaredShared.has(tensor.name);
  const dims = batched ? tensor.shape.slice(1) : [...tensor.shape];
  const entry: ParsedMessage = {
    name: tensor.name,
    data_type: configTypeName(tensor.datatype),
    dims: dims.map(BigInt),
  };
  if (dims.length === 0) {
    // A config cannot give empty dims: a one-element tensor, reshaped to a scalar for the model.
    entry.dims = [1n];
    if (maxBatchSize > 0) entry.reshape = { shape: [] };
  }
  return entry;
}

/**
 * Completes the config from the model file (not in strict mode): the whole input or
 * output list when it is missing, with max_batch_size and dynamic batching as Triton's
 * ONNX Runtime backend sets them; a missing data_type or dims of a listed tensor.
 */
export function completeIo(io: IoContext): void {
  const { root, modelIo } = io;
  const modelName = root.ctx.modelName;
  const inputsMissing = root.list("input").length === 0 && root.list("batch_input").length === 0;
  const outputsMissing = root.list("output").length === 0;
  if (io.strict || modelIo === undefined) {
    const why = io.strict
      ? "in strict mode the configuration is not completed from the model file"
      : "the model file has not been read to complete it";
    if (inputsMissing)
      root.fail(undefined, `the configuration of model '${modelName}' lists no inputs, and ${why}`);
    if (outputsMissing)
      root.fail(undefined, `the configuration of model '${modelName}' lists no outputs, and ${why}`);
    return;
  }

  if (inputsMissing || outputsMissing) {
    const batching = supportsBatching(io, modelIo);
    // An explicit 0 is kept: configs written for seqserve say "no batching" with it
    // (Triton's backend reads it as unset, a proto3 int, and batches where it can).
    if (!root.has("max_batch_size")) {
      root.set("max_batch_size", batching ? io.defaultMaxBatchSize : 0);
    } else if (!batching && root.number("max_batch_size") !== 0) {
      root.fail(
        "max_batch_size",
        `autofill failed for model '${modelName}': model does not support batching while non-zero max_batch_size is specified`,
      );
    }
    const maxBatchSize = root.number("max_batch_size");
    const scheduled =
      root.has("dynamic_batching") || root.has("sequence_batching") || root.has("ensemble_scheduling");
    if (batching && maxBatchSize > 1 && !scheduled) root.set("dynamic_batching", {});
    if (inputsMissing) {
      const inputs = modelIo.inputs.filter((t) => !io.sequenceInputs.has(t.name));
      root.set(
        "input",
        inputs.map((t) => entryFor(io, "input", t, maxBatchSize)),
      );
    }
    if (outputsMissing) {
      const outputs = modelIo.outputs.filter((t) => !io.stateOutputs.has(t.name));
      root.set(
        "output",
        outputs.map((t) => entryFor(io, "output", t, maxBatchSize)),
      );
    }
  }

  const maxBatchSize = root.number("max_batch_size");
  for (const kind of ["input", "output"] as const) {
    const tensors = kind === "input" ? modelIo.inputs : modelIo.outputs;
    for (const node of root.children(kind)) {
      const tensor = tensors.find((t) => t.name === node.string("name"));
      if (tensor === undefined) continue;
      if (!node.has("data_type") && tensor.datatype !== undefined) {
        node.set("data_type", configTypeName(tensor.datatype));
      }
      if (!node.has("dims") && tensor.shape !== undefined) {
        const complete = entryFor(io, kind, tensor, maxBatchSize);
        node.set("dims", complete.dims as bigint[]);
        if (complete.reshape !== undefined && !node.has("reshape")) node.set("reshape", complete.reshape);
      }
    }
  }
}

interface CommonTensor {
  readonly node: MessageNode;
  readonly name: string;
  readonly datatype: DataType;
  readonly dims: number[];
  readonly reshape: number[] | undefined;
  /** The model file's view of the tensor, when the model was read. */
  readonly tensor: ModelTensorInfo | undefined;
  readonly what: string;
}

/** What inputs and outputs share: name, data_type, dims and reshape checks, and the model's own tensor. */
function commonTensor(io: IoContext, kind: Kind, node: MessageNode, seen: Set<string>): CommonTensor {
  const modelName = io.root.ctx.modelName;
  const name = node.string("name");
  if (name === "") node.fail("name", `model ${kind} must specify 'name' for model '${modelName}'`);
  const what = `model ${kind} '${name}'`;
  if (seen.has(name))
    node.fail("name", `${what} is listed twice in the configuration of model '${modelName}'`);
  seen.add(name);

  const typeName = node.string("data_type", "TYPE_INVALID");
  const datatype = fromConfigTypeName(typeName);
  if (datatype === undefined)
    node.fail("data_type", `${what} must specify 'data_type' for model '${modelName}'`);
  if (!node.has("dims")) node.fail(undefined, `${what} must specify 'dims' for model '${modelName}'`);
  const dims = node.safeNumbers("dims");
  checkDims(node, "dims", dims, what);
  const reshapeNode = node.child("reshape");
  const reshape = reshapeNode?.safeNumbers("shape");
  if (reshape !== undefined) checkReshape(node, dims, reshape, io.root.number("max_batch_size"), what);
  if (node.bool("is_shape_tensor"))
    node.fail("is_shape_tensor", "shape tensors are only supported for TensorRT platform");
  if (node.bool("is_non_linear_format_io")) {
    node.fail("is_non_linear_format_io", "Non-linear IO format is only supported for the TensorRT platform");
  }

  let tensor: ModelTensorInfo | undefined;
  if (io.modelIo !== undefined) {
    const tensors = kind === "input" ? io.modelIo.inputs : io.modelIo.outputs;
    tensor = tensors.find((t) => t.name === name);
    if (tensor === undefined) {
      node.fail(
        "name",
        `unexpected inference ${kind} '${name}' for model '${modelName}', allowed ${kind}s are: ` +
          tensors.map((t) => t.name).join(", "),
      );
    }
    if (tensor.datatype === undefined) unservable(io, kind, tensor);
    if (tensor.datatype !== datatype) {
      node.fail(
        "data_type",
        `unable to load model '${modelName}', configuration expects datatype ${typeName} for ${kind} '${name}', ` +
          `model provides ${configTypeName(tensor.datatype)}`,
      );
    }
  }
  return { node, name, datatype, dims, reshape, tensor, what };
}

/** A rank-0 model tensor configured as one element (dims all 1): the model gets a scalar. */
function isScalarInModel(tensor: ModelTensorInfo | undefined, modelDims: readonly number[]): boolean {
  return tensor?.shape?.length === 0 && modelDims.every((dim) => dim === 1);
}

/**
 * The stateful backend's batch dimension: the one dim marked -1, when the model's tensor
 * has the rank of dims (a model with one more dimension follows Triton's convention, its
 * batch first). Undefined when the tensor is batched the Triton way.
 */
function markedBatchAxis(io: IoContext, t: CommonTensor): number | undefined {
  if (!io.batchMarkedInDims || io.root.number("max_batch_size") === 0) return undefined;
  const shape = t.tensor?.shape;
  if (shape !== undefined && shape.length === t.dims.length + 1) return undefined;
  const marked = t.dims.flatMap((dim, i) => (dim === -1 ? [i] : []));
  if (marked.length === 0 && shape === undefined) return undefined;
  if (marked.length !== 1) {
    t.node.fail(
      "dims",
      `${t.what} of model '${io.root.ctx.modelName}' has dims ${formatShapeSpaced(t.dims)}: backend 'stateful' batches ` +
        "along the one dimension marked -1, and every other dimension must be fixed",
    );
  }
  if (t.reshape !== undefined) {
    t.node.fail(
      "reshape",
      `${t.what}: backend 'stateful' does not reshape tensors batched along a marked dimension`,
    );
  }
  if (shape !== undefined) checkAgainstModel(t.node, "dims", t.what, shape, t.dims, false);
  return marked[0];
}

export function resolveInputs(io: IoContext): InputConfig[] {
  const { root } = io;
  const modelName = root.ctx.modelName;
  const maxBatchSize = root.number("max_batch_size");
  const seen = new Set<string>();
  return root.children("input").map((node): InputConfig => {
    const t = commonTensor(io, "input", node, seen);
    if (io.sequenceInputs.has(t.name)) {
      node.fail(
        "name",
        `input '${t.name}' of model '${modelName}' is a sequence control or state tensor, which the sequence batcher ` +
          "feeds, so it must not also be listed in 'input'",
      );
    }
    const format = node.string("format", "FORMAT_NONE");
    if (format !== "FORMAT_NONE" && t.dims.length !== 3)
      node.fail("format", "model input NHWC/NCHW require 3 dims");

    const declared = io.declaredShared.has(t.name);
    const marked = declared ? undefined : markedBatchAxis(io, t);
    if (marked !== undefined) {
      return {
        name: t.name,
        datatype: t.datatype,
        dims: t.dims,
        optional: node.bool("optional"),
        allowRaggedBatch: node.bool("allow_ragged_batch"),
        shared: false,
        markedBatchAxis: marked,
      };
    }
    const modelDims = t.reshape ?? t.dims;
    const field = t.reshape === undefined ? "dims" : "reshape";
    let shared = maxBatchSize > 0 && declared;
    let reshape = t.reshape;
    const shape = t.tensor?.shape;
    if (shape !== undefined) {
      if (isScalarInModel(t.tensor, modelDims)) {
        shared = maxBatchSize > 0;
        if (modelDims.length > 0) reshape = [];
      } else if (maxBatchSize > 0 && !declared && shape.length === modelDims.length && shape[0] === -1) {
        // Either the batch dimension was forgotten or the input is shared: only the config can say which.
        node.fail(
          field,
          `${t.what} of model '${modelName}' has ${shape.length} dimensions ${formatShapeSpaced(shape)} in the model, as many ` +
            "as its configured dims, but max_batch_size > 0 needs one more, the batch dimension first " +
            "(an input shared by the whole batch is named in the 'shared_inputs' parameter)",
        );
      } else if (maxBatchSize > 0 && (declared || shape.length === modelDims.length)) {
        if (declared && shape.length === modelDims.length + 1) {
          node.fail(
            field,
            `input '${t.name}' is listed in shared_inputs, but model '${modelName}' gives it a batch dimension ` +
              `${formatShapeSpaced(shape)}`,
          );
        }
        shared = true;
        checkAgainstModel(node, field, t.what, shape, modelDims, false);
      } else {
        checkAgainstModel(node, field, t.what, shape, modelDims, maxBatchSize > 0);
      }
    }
    return {
      name: t.name,
      datatype: t.datatype,
      dims: t.dims,
      ...(reshape === undefined ? {} : { reshape }),
      optional: node.bool("optional"),
      allowRaggedBatch: node.bool("allow_ragged_batch"),
      shared,
    };
  });
}

export function resolveOutputs(io: IoContext): OutputConfig[] {
  const { root } = io;
  const modelName = root.ctx.modelName;
  const maxBatchSize = root.number("max_batch_size");
  const seen = new Set<string>();
  return root.children("output").map((node): OutputConfig => {
    const t = commonTensor(io, "output", node, seen);
    const marked = markedBatchAxis(io, t);
    if (marked !== undefined) {
      return { name: t.name, datatype: t.datatype, dims: t.dims, markedBatchAxis: marked };
    }
    const modelDims = t.reshape ?? t.dims;
    const field = t.reshape === undefined ? "dims" : "reshape";
    let reshape = t.reshape;
    const shape = t.tensor?.shape;
    if (shape !== undefined) {
      if (isScalarInModel(t.tensor, modelDims)) {
        if (maxBatchSize > 0) {
          node.fail(
            field,
            `output '${t.name}' is a scalar in model '${modelName}', so it has no batch dimension for max_batch_size > 0`,
          );
        }
        if (modelDims.length > 0) reshape = [];
      } else {
        checkAgainstModel(node, field, t.what, shape, modelDims, maxBatchSize > 0);
      }
    }
    const labelFilename = node.string("label_filename");
    // Its lines go back to clients (classification): it must be a file of the model's own.
    if (labelFilename !== "" && !namesFileInside(labelFilename)) {
      node.fail(
        "label_filename",
        `label_filename '${labelFilename}' of output '${t.name}' of model '${modelName}' must name a file in the model's folder`,
      );
    }
    return {
      name: t.name,
      datatype: t.datatype,
      dims: t.dims,
      ...(reshape === undefined ? {} : { reshape }),
      ...(labelFilename === "" ? {} : { labelFilename }),
    };
  });
}
