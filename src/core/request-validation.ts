import { invalidArg } from "./errors.ts";
import type { InferRequest } from "./infer.ts";
import type { InputConfig, ModelConfig } from "./model-config.ts";
import { requestLabel } from "./request-label.ts";
import { checkCorrelationIdType } from "./sequence/control-tensors.ts";
import {
  type BytesElements,
  elementCount,
  type NumericTensor,
  shapeInMessage,
  type Tensor,
} from "./tensor.ts";

// Checks a request against its model's config before it is queued, with Triton's
// messages and in Triton's order (outputs, input count, input names, batch size, then
// each input's datatype and shape, the correlation id's type, then the sequence
// batcher's batch of one), and prepares what the schedulers need: the inputs as the model
// sees them (reshaped), the rows the request contributes to a batch, and a key that only
// requests which can share a batch have in common. The messages of the checks Triton
// makes as it normalizes a request open with the request's id, as Triton's do
// ("[request id: <id_unknown>] ...").

export interface ValidatedRequest {
  /** Rows this request adds to a batch (1 for a model that does not batch). */
  readonly rows: number;
  /** Model-facing inputs: reshaped, with the batch dimension when the model batches. */
  readonly inputs: ReadonlyMap<string, Tensor>;
  readonly outputNames: readonly string[];
  /** Requests with equal keys can be concatenated into one batch. */
  readonly batchKey: string;
}

/**
 * Names as Triton's input-count message lists them, quirk included: it writes "[", each
 * name and a comma, then drops the last character, so a list with no names is "]" (the
 * given inputs' list, empty, is written "[]" by a case of its own).
 */
function listedNames(names: Iterable<string>, emptyAs: string): string {
  const list = [...names].map((n) => `'${n}'`);
  return list.length === 0 ? emptyAs : `[${list.join(",")}]`;
}

function checkInputCount(config: ModelConfig, request: InferRequest): void {
  const required = config.inputs.filter((i) => !i.optional);
  const given = request.inputs.size;
  if (given <= config.inputs.length && given >= required.length) return;
  const missing = required.filter((i) => !request.inputs.has(i.name)).map((i) => i.name);
  const expected =
    required.length === config.inputs.length
      ? `expected ${config.inputs.length} inputs`
      : `expected number of inputs between ${required.length} and ${config.inputs.length}`;
  throw invalidArg(
    `${requestLabel(request.id)}${expected} but got ${given} inputs for model '${config.name}'. Got input(s) ${listedNames(request.inputs.keys(), "[]")}, but missing required input(s) ${listedNames(missing, "]")}. Please provide all required input(s).`,
  );
}

/** Whether `shape` from dimension `from` on (past a batch dimension) matches `dims`. */
function matchesDims(dims: readonly number[], shape: readonly number[], from: number): boolean {
  if (dims.length !== shape.length - from) return false;
  for (let i = 0; i < dims.length; i++) if (dims[i] !== -1 && dims[i] !== shape[from + i]) return false;
  return true;
}

/** What validateRequest looks up in a config on every request, made once per config. */
interface ConfigIndex {
  readonly inputsByName: ReadonlyMap<string, InputConfig>;
  /** Every output's name: what a request that names none asks for. */
  readonly outputNames: readonly string[];
}

const configIndexes = new WeakMap<ModelConfig, ConfigIndex>();

function indexOf(config: ModelConfig): ConfigIndex {
  let index = configIndexes.get(config);
  if (index === undefined) {
    index = {
      inputsByName: new Map(config.inputs.map((input) => [input.name, input])),
      outputNames: config.outputs.map((output) => output.name),
    };
    configIndexes.set(config, index);
  }
  return index;
}

/** The batch key part of a shape from dimension `from` on: the marked batch dimension may differ between requests. */
function shapeKey(shape: readonly number[], from: number, marked: number | undefined): string {
  let key = "[";
  for (let i = from; i < shape.length; i++) {
    if (i > from) key += ",";
    key += i - from === marked ? "-1" : String(shape[i]);
  }
  return `${key}]`;
}

/** Whether `inputs` (all of them the config's) come in the order of the config's inputs. */
function inConfigOrder(config: ModelConfig, inputs: ReadonlyMap<string, Tensor>): boolean {
  let at = 0;
  for (const name of inputs.keys()) {
    while (at < config.inputs.length && config.inputs[at]!.name !== name) at++;
    if (at === config.inputs.length) return false;
    at++;
  }
  return true;
}

/** The entries of `inputs`, which come in the config's order, before `name`. */
function entriesBefore(inputs: ReadonlyMap<string, Tensor>, name: string): Map<string, Tensor> {
  const before = new Map<string, Tensor>();
  for (const [key, tensor] of inputs) {
    if (key === name) break;
    before.set(key, tensor);
  }
  return before;
}

/**
 * `shape`, a tensor's shape in `dims` (without the batch dimension), in `target`'s terms:
 * each variable dimension of `target` takes the next variable dimension's size, as Triton
 * maps a reshape both ways (an input to the model's shape, an output back to the client's).
 */
export function reshaped(
  dims: readonly number[],
  target: readonly number[],
  shape: readonly number[],
): number[] {
  const variable: number[] = [];
  for (let i = 0; i < dims.length; i++) if (dims[i] === -1) variable.push(shape[i]!);
  return target.map((d) => (d === -1 ? (variable.shift() ?? 1) : d));
}

/** A short fingerprint of a shared input's value (shared inputs are small: scalars, flags). */
function valueKey(tensor: Tensor): string {
  if (tensor.datatype === "BYTES") {
    return (tensor.data as BytesElements).map((e) => Buffer.from(e).toString("hex")).join(",");
  }
  const data = (tensor as NumericTensor).data;
  return Buffer.from(data.buffer, data.byteOffset, data.byteLength).toString("hex");
}

/**
 * The rows one input brings to a batch: its leading (batch) dimension, or, for an input
 * batched along a dimension marked in its dims (the ONNX stateful backend), that
 * dimension, with the leading one required to be 1.
 */
function rowsOf(input: InputConfig, tensor: Pick<Tensor, "shape">, model: string): number {
  const marked = input.markedBatchAxis;
  if (marked === undefined) return tensor.shape[0]!;
  if (tensor.shape[0] !== 1) {
    throw invalidArg(
      `input '${input.name}' for model '${model}' must have a leading batch dimension of 1: the model batches it ` +
        `along dimension ${marked + 1} (marked -1 in its dims), got ${shapeInMessage(tensor.shape)}`,
    );
  }
  // A shape too short for the marked dimension fails the dims check below, with its message.
  return tensor.shape[marked + 1] ?? 1;
}

/**
 * The input's datatype and shape against its config (`batched`: the model batches this
 * input); the messages open with the request's id (requestLabel).
 */
function checkTypeAndShape(
  model: string,
  input: InputConfig,
  tensor: Pick<Tensor, "datatype" | "shape">,
  batched: boolean,
  requestId: string,
): void {
  if (tensor.datatype !== input.datatype) {
    throw invalidArg(
      `${requestLabel(requestId)}inference input '${input.name}' data-type is '${tensor.datatype}', but model '${model}' expects '${input.datatype}'`,
    );
  }
  for (const dim of tensor.shape) {
    if (dim < 0) {
      throw invalidArg(
        `${requestLabel(requestId)}All input dimensions should be specified for input '${input.name}' for model '${model}', got ${shapeInMessage(tensor.shape)}`,
      );
    }
  }
  if (!matchesDims(input.dims, tensor.shape, batched ? 1 : 0)) {
    const expected = batched ? [-1, ...input.dims] : input.dims;
    const note = batched
      ? " NOTE: Setting a non-zero max_batch_size in the model config requires a batch dimension to be prepended to each input shape. If you want to specify the full shape including the batch dim in your input dims config, try setting max_batch_size to zero. See the model configuration docs for more info on max_batch_size."
      : "";
    throw invalidArg(
      `${requestLabel(requestId)}unexpected shape for input '${input.name}' for model '${model}'. Expected ${shapeInMessage(expected)}, got ${shapeInMessage(tensor.shape)}.${note}`,
    );
  }
}

/**
 * One input's name, datatype and shape against the model, with validateRequest's messages:
 * for a frontend that must know an input fits before it fetches the input's data (from
 * shared memory, where a small request can name many bytes). Its rows are checked against
 * the most the model takes, not yet against the other inputs'.
 */
export function checkInputDescription(
  config: ModelConfig,
  requestId: string,
  name: string,
  tensor: Pick<Tensor, "datatype" | "shape">,
): void {
  const model = config.name;
  const input = config.inputs.find((i) => i.name === name);
  if (input === undefined) throw invalidArg(`unexpected inference input '${name}' for model '${model}'`);
  const batched = config.maxBatchSize > 0 && !input.shared;
  if (batched) {
    if (tensor.shape.length === 0) {
      throw invalidArg(
        `${requestLabel(requestId)}input '${name}' has no shape but model requires batch dimension for '${model}'`,
      );
    }
    const rows = rowsOf(input, tensor, model);
    if (rows > config.maxBatchSize) {
      throw invalidArg(
        `${requestLabel(requestId)}inference request batch-size must be <= ${config.maxBatchSize} for '${model}'`,
      );
    }
  }
  // The sequence batcher's batch of one is left to validateRequest, after the correlation
  // id's type, as Triton orders them.
  checkTypeAndShape(model, input, tensor, batched, requestId);
}

/** The sequence batcher's own check, after the request's (Triton makes it as it enqueues). */
function checkSequenceBatchOfOne(config: ModelConfig): void {
  if (config.sequenceBatching === undefined) return;
  throw invalidArg(
    `inference request to model '${config.name}' must specify batch-size 1 due to requirements of sequence batcher`,
  );
}

export function validateRequest(config: ModelConfig, request: InferRequest): ValidatedRequest {
  const model = config.name;
  const index = indexOf(config);
  let outputNames = index.outputNames;
  if (request.outputs !== undefined) {
    const outputs = request.outputs;
    for (let i = 0; i < outputs.length; i++) {
      const name = outputs[i]!;
      if (!config.outputs.some((o) => o.name === name)) {
        throw invalidArg(`unexpected inference output '${name}' for model '${model}'`);
      }
      // As Triton, which keeps requested outputs by name: each once.
      if (outputs.indexOf(name) !== i) throw invalidArg(`output '${name}' is requested more than once`);
    }
    outputNames = outputs;
  }

  // Triton's order: the count of inputs, then each one's name.
  checkInputCount(config, request);
  const byName = index.inputsByName;
  for (const name of request.inputs.keys()) {
    if (!byName.has(name)) throw invalidArg(`unexpected inference input '${name}' for model '${model}'`);
  }

  const batching = config.maxBatchSize > 0;
  let batch = 0;
  if (batching) {
    // The first batched input sets the batch size, 0 included: every other must agree
    // (an input of 0 rows beside one of 3 is refused in either order).
    let first = true;
    for (const [name, tensor] of request.inputs) {
      const input = byName.get(name)!;
      if (input.shared) continue;
      if (tensor.shape.length === 0) {
        throw invalidArg(
          `${requestLabel(request.id)}input '${name}' has no shape but model requires batch dimension for '${model}'`,
        );
      }
      const rows = rowsOf(input, tensor, model);
      if (first) batch = rows;
      else if (rows !== batch)
        throw invalidArg(
          `${requestLabel(request.id)}input '${name}' batch size does not match other inputs for '${model}'`,
        );
      first = false;
    }
    if (batch === 0 && !first) {
      throw invalidArg(`inference request batch-size must be > 0 for '${model}'`);
    }
    if (batch > config.maxBatchSize) {
      throw invalidArg(
        `${requestLabel(request.id)}inference request batch-size must be <= ${config.maxBatchSize} for '${model}'`,
      );
    }
  }

  // The request's own tensors serve as they are, in the config's order (the order the
  // model's code sees them in, and the first bad input an error names), unless one must
  // be reshaped for the model.
  let inputs: Map<string, Tensor> | undefined = inConfigOrder(config, request.inputs) ? undefined : new Map();
  let batchKey = "";
  for (const input of config.inputs) {
    const tensor = request.inputs.get(input.name);
    if (tensor === undefined) continue;
    const batched = batching && !input.shared;
    checkTypeAndShape(model, input, tensor, batched, request.id);
    const count = elementCount(tensor.shape);
    const length =
      tensor.datatype === "BYTES"
        ? (tensor.data as BytesElements).length
        : (tensor as NumericTensor).data.length;
    if (length !== count) {
      throw invalidArg(
        `input '${input.name}' for model '${model}' has ${length} elements, but its shape ${shapeInMessage(tensor.shape)} needs ${count}`,
      );
    }
    const marked = batched ? input.markedBatchAxis : undefined;
    let modelTensor = tensor;
    // The model sees the client's shape: for a batched input, its batch dimension is the
    // rows every input agreed on, and the key is the shape past it.
    let keyShape = tensor.shape;
    let keyFrom = batched ? 1 : 0;
    if (input.reshape !== undefined || marked !== undefined) {
      // Reshaped, or batched along a marked dimension (the leading 1 dropped).
      const shape = batched ? tensor.shape.slice(1) : tensor.shape;
      const modelShape = input.reshape === undefined ? shape : reshaped(input.dims, input.reshape, shape);
      const fullShape = batched && marked === undefined ? [batch, ...modelShape] : modelShape;
      modelTensor = { ...tensor, shape: fullShape };
      inputs ??= entriesBefore(request.inputs, input.name);
      keyShape = modelShape;
      keyFrom = 0;
    }
    inputs?.set(input.name, modelTensor);
    // A shared input's value is its shape and its bytes: the same bytes as [1, 2] and as
    // [2, 1] are two values, and requests that disagree must be batched apart.
    const shapePart = `${input.name}${shapeKey(keyShape, keyFrom, marked)}`;
    const keyPart = input.shared ? `${shapePart}=${valueKey(tensor)}` : shapePart;
    batchKey = batchKey === "" ? keyPart : `${batchKey}|${keyPart}`;
  }

  const id = request.sequence?.id;
  if (config.sequenceBatching !== undefined && id !== undefined)
    checkCorrelationIdType(config, id, request.id);
  if (batch > 1) checkSequenceBatchOfOne(config);

  return {
    rows: batching ? Math.max(batch, 1) : 1,
    inputs: inputs ?? request.inputs,
    outputNames,
    batchKey,
  };
}
