import type { MessageNode } from "./config-node.ts";
import { formatShapeSpaced } from "./config-node.ts";

// Shape rules shared by inputs, outputs and state: Triton's checks of `dims` and
// `reshape`, and the comparison of a configured shape with the model file's own.

/** Triton's rule for a dims entry: at least 1, or -1 for a variable size. */
export function checkDims(node: MessageNode, field: string, dims: readonly number[], what: string): void {
  dims.forEach((dim, i) => {
    if (dim < 1 && dim !== -1) {
      node.failItem(
        field,
        i,
        `${what} dimension must be integer >= 1, or -1 to indicate a variable-size dimension`,
      );
    }
  });
}

const product = (shape: readonly number[]): number => shape.reduce((a, b) => a * b, 1);

/** The element counts of runs of fixed dims between variable ones. */
function chunks(shape: readonly number[]): number[] {
  const counts: number[] = [];
  let count = 1;
  for (const dim of shape) {
    if (dim === -1) {
      counts.push(count);
      count = 1;
    } else {
      count *= dim;
    }
  }
  counts.push(count);
  return counts;
}

/** Triton's reshape rules: same element count (per variable-size run), empty only for one element. */
export function checkReshape(
  node: MessageNode,
  dims: readonly number[],
  reshape: readonly number[],
  maxBatchSize: number,
  what: string,
): void {
  const reshapeNode = node.child("reshape") ?? node;
  if (reshape.length === 0 && maxBatchSize === 0) {
    reshapeNode.fail(
      "shape",
      `${what} cannot have empty reshape for non-batching model as scalar tensors are not supported`,
    );
  }
  checkDims(reshapeNode, "shape", reshape, `${what} reshape`);
  const differentSize = `${what} has different size for dims and reshape`;
  if (reshape.length === 0) {
    if (dims.includes(-1) || product(dims) !== 1) reshapeNode.fail("shape", differentSize);
    return;
  }
  const dimsChunks = chunks(dims);
  const reshapeChunks = chunks(reshape);
  if (dimsChunks.length !== reshapeChunks.length) {
    reshapeNode.fail(
      "shape",
      dims.includes(-1) || reshape.includes(-1)
        ? `${what} has different number of variable-size dimensions for dims and reshape`
        : differentSize,
    );
  }
  if (dimsChunks.some((count, i) => count !== reshapeChunks[i])) reshapeNode.fail("shape", differentSize);
}

/**
 * Compares a model file's shape with the configured per-request dims: with `batched`,
 * the model's first dimension is the (variable) batch and the rest must match dims.
 * A fixed dimension in the model must be the same in the configuration.
 */
export function checkAgainstModel(
  node: MessageNode,
  field: string,
  what: string,
  modelShape: readonly number[],
  dims: readonly number[],
  batched: boolean,
): void {
  const expected = batched ? [-1, ...dims] : [...dims];
  const { modelName } = node.ctx;
  if (modelShape.length !== expected.length) {
    node.fail(
      field,
      `${what} of model '${modelName}' has ${modelShape.length} dimensions ${formatShapeSpaced(modelShape)} in the model, ` +
        `but the configuration gives it ${expected.length} ${formatShapeSpaced(expected)}` +
        (batched ? " (the batch dimension, as max_batch_size > 0, followed by dims)" : ""),
    );
  }
  if (batched && modelShape[0] !== -1) {
    node.fail(
      field,
      `${what} of model '${modelName}' has a first dimension of ${modelShape[0]} in the model ` +
        `${formatShapeSpaced(modelShape)}, so it cannot be the batch dimension that max_batch_size > 0 implies`,
    );
  }
  modelShape.forEach((modelDim, i) => {
    const configDim = expected[i];
    if (modelDim !== -1 && configDim !== modelDim) {
      node.fail(
        field,
        `dimension ${i} of ${what} is ${configDim} in the configuration but ${modelDim} in model '${modelName}' ` +
          `(model shape ${formatShapeSpaced(modelShape)}, configured shape ${formatShapeSpaced(expected)})`,
      );
    }
  });
}
