import { DATATYPES } from "../../../core/datatype.ts";
import { invalidArg } from "../../../core/errors.ts";
import type { InferResponse, NamedTensor } from "../../../core/infer.ts";
import type { ServedModel } from "../../../core/model.ts";
import type { NumericTensor } from "../../../core/tensor.ts";

// Triton's classification extension: an output asked for with `classification: k` comes
// back as its k largest values, per batch entry, as BYTES strings "<value>:<index>" (and
// ":<label>" when the output names a label file), largest first. Values are printed as
// C++'s std::to_string prints them: integers as they are, floating point with six
// decimals. Shape [batch, k] for a batching model, else [k] (k at most the values there are).

/** The datatypes Triton classifies: the integers, FP32 and FP64; any other output is refused. */
const CLASSIFIABLE: ReadonlySet<string> = new Set(
  DATATYPES.filter((type) => !["BOOL", "FP16", "BF16", "BYTES"].includes(type)),
);

/** Triton's bound on the values one classification looks at. */
const MAX_CLASSIFIED_VALUES = 1_000_000;

/**
 * An output's `classification` parameter: how many classes it asks for (a whole number;
 * 0 asks for none, as in Triton).
 */
export function classificationCount(output: string, value: unknown): number {
  const count = typeof value === "bigint" ? Number(value) : value;
  if (typeof count !== "number" || !Number.isSafeInteger(count) || count < 0 || count > 2 ** 32 - 1) {
    throw invalidArg(
      `Unable to set 'classification' for output '${output}': expected a whole number of classes`,
    );
  }
  return count;
}

/** The classes a request asks for, by output, and the model that answers it. */
export interface Classification {
  readonly model: ServedModel;
  readonly counts: ReadonlyMap<string, number>;
}

/**
 * The classes a request to `model` asks for (undefined: none). Refuses, before the model
 * runs, classes of an output whose declared datatype has none: a sequence's step must not
 * be applied for an answer that cannot be given.
 */
export function classificationFor(
  model: ServedModel,
  counts: ReadonlyMap<string, number> | undefined,
): Classification | undefined {
  if (counts === undefined) return undefined;
  for (const output of model.outputs) {
    if (counts.has(output.name) && !CLASSIFIABLE.has(output.datatype))
      unclassifiable(output.name, output.datatype);
  }
  return { model, counts };
}

function unclassifiable(name: string, datatype: string): never {
  throw invalidArg(`class result not available for output '${name}' due to unsupported type '${datatype}'`);
}

/** The outputs named in `classification` replaced by their top-k classes. */
export function classifyOutputs(
  response: InferResponse,
  classification: Classification | undefined,
): InferResponse {
  if (classification === undefined || classification.counts.size === 0) return response;
  const { model, counts } = classification;
  return {
    ...response,
    outputs: response.outputs.map((output) => {
      const k = counts.get(output.name);
      return k === undefined || k === 0 ? output : classify(model, output, k);
    }),
  };
}

function classify(model: ServedModel, output: NamedTensor, k: number): NamedTensor {
  if (!CLASSIFIABLE.has(output.datatype)) unclassifiable(output.name, output.datatype);
  const values = (output as NumericTensor).data;
  const batched = model.config.maxBatchSize > 0 && output.shape.length > 0;
  const batch = batched ? output.shape[0]! : 1;
  const perEntry = batch === 0 ? 0 : values.length / batch;
  if (perEntry > MAX_CLASSIFIED_VALUES) throw invalidArg("classification output tensor too large");
  const labels = model.labels?.get(output.name);
  const encoder = new TextEncoder();
  const classes = Math.min(k, perEntry);
  const data: Uint8Array[] = [];
  for (let entry = 0; entry < batch; entry++) {
    const offset = entry * perEntry;
    for (const index of topIndices(values, offset, perEntry, classes)) {
      let text = `${formatValue(values[offset + index]!, output.datatype)}:${index}`;
      const label = labels?.[index];
      if (label !== undefined) text += `:${label}`;
      data.push(encoder.encode(text));
    }
  }
  return { name: output.name, datatype: "BYTES", shape: batched ? [batch, classes] : [classes], data };
}

/** std::to_string: integers in full, floating point as printf's "%f" (six decimals, ties to even). */
function formatValue(value: number | bigint, datatype: string): string {
  if (typeof value === "bigint" || (datatype !== "FP32" && datatype !== "FP64")) return String(value);
  if (Number.isNaN(value)) return "nan";
  if (!Number.isFinite(value)) return value > 0 ? "inf" : "-inf";
  if (Object.is(value, -0)) return "-0.000000";
  // toFixed rounds a tie away from zero, printf to the even neighbour. A tie is a value
  // whose exact decimals end in 5 just past the sixth (1/128 = 0.0078125).
  const exact = Math.abs(value).toFixed(20);
  const point = exact.indexOf(".");
  if (/^50*$/.test(exact.slice(point + 7))) {
    const towardZero = exact.slice(0, point + 7);
    if (Number(towardZero.at(-1)) % 2 === 0) return value < 0 ? `-${towardZero}` : towardZero;
  }
  return value.toFixed(6);
}

/**
 * The indices of the `k` largest of `count` values from `offset`, largest first; equal
 * values by index (a stable order where C++'s sort promises none). A heap of k: a request
 * for a few classes of a million values does not sort them all on the main thread.
 */
function topIndices(values: ArrayLike<number | bigint>, offset: number, count: number, k: number): number[] {
  // `before(a, b)`: a ranks ahead of b.
  const before = (a: number, b: number): boolean => {
    const x = values[offset + a]!;
    const y = values[offset + b]!;
    return x > y || (x === y && a < b);
  };
  // A min-heap by rank: its root is the weakest of the best k so far.
  const heap: number[] = [];
  const down = (at: number): void => {
    for (;;) {
      const left = 2 * at + 1;
      const right = left + 1;
      let weakest = at;
      if (left < heap.length && before(heap[weakest]!, heap[left]!)) weakest = left;
      if (right < heap.length && before(heap[weakest]!, heap[right]!)) weakest = right;
      if (weakest === at) return;
      [heap[at], heap[weakest]] = [heap[weakest]!, heap[at]!];
      at = weakest;
    }
  };
  for (let i = 0; i < count; i++) {
    if (heap.length < k) {
      heap.push(i);
      for (let at = heap.length - 1; at > 0; ) {
        const parent = (at - 1) >> 1;
        if (!before(heap[parent]!, heap[at]!)) break;
        [heap[at], heap[parent]] = [heap[parent]!, heap[at]!];
        at = parent;
      }
    } else if (k > 0 && before(i, heap[0]!)) {
      heap[0] = i;
      down(0);
    }
  }
  return heap.sort((a, b) => (before(a, b) ? -1 : 1));
}
