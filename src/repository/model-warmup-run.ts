import { randomFillSync } from "node:crypto";
import { readFileSync } from "node:fs";
import { configTypeName, elementByteSize, type NumericDataType, viewArray } from "../core/datatype.ts";
import { asServerError, invalidArg } from "../core/errors.ts";
import { isRequestExecutor, type ModelExecutor } from "../core/executor.ts";
import type { ModelConfig, WarmupInput, WarmupSample } from "../core/model-config.ts";
import { elementCount, sameShape, type Tensor, type TensorData } from "../core/tensor.ts";
import type { Logger } from "../observability/logger.ts";

// Triton's model warm-up, run on every instance before the model is served: each sample
// is a batch of `batch_size` requests (one row each, the same values in every row), run
// `count` times. A sample that fails fails the load, as in Triton. The answers are
// dropped, and nothing is counted in the model's statistics.
//
// Run on ONNX models without sequence batching. A sequence model's state inputs, which
// Triton fills in for a sample, and model code, which runs requests rather than tensors,
// load without their samples run (the config notes it).

/** Whether seqserve runs `config`'s samples on these instances. */
function runsWarmup(config: ModelConfig, executors: readonly ModelExecutor[]): boolean {
  return (
    config.warmup.length > 0 &&
    config.sequenceBatching === undefined &&
    !executors.some((executor) => isRequestExecutor(executor))
  );
}

/** Triton's input_data_file form of strings: each a 4-byte little-endian length, then its bytes. */
function stringsOf(file: Buffer, count: number, input: WarmupInput): Uint8Array[] {
  const elements: Uint8Array[] = [];
  let offset = 0;
  while (elements.length < count && offset + 4 <= file.byteLength) {
    const length = file.readUInt32LE(offset);
    if (offset + 4 + length > file.byteLength) break;
    elements.push(file.subarray(offset + 4, offset + 4 + length));
    offset += 4 + length;
  }
  if (elements.length < count) {
    throw invalidArg(
      `warmup setting expects ${count} strings for input '${input.name}', but the data provided from ${input.data.kind === "file" ? input.data.path : "its file"} holds ${elements.length}`,
    );
  }
  return elements;
}

/** One row of the input's values: what each request of the sample carries. */
function rowOf(input: WarmupInput): Uint8Array | Uint8Array[] {
  const count = elementCount(input.dims);
  const { data } = input;
  if (input.datatype === "BYTES") {
    // As Triton: random strings are empty strings, as zero ones are.
    if (data.kind !== "file") return Array.from({ length: count }, () => new Uint8Array(0));
    return stringsOf(readFileSync(data.path), count, input);
  }
  const bytes = count * elementByteSize(input.datatype)!;
  if (data.kind === "zero") return new Uint8Array(bytes);
  if (data.kind === "random") return randomFillSync(new Uint8Array(bytes));
  const file = readFileSync(data.path);
  if (file.byteLength < bytes) {
    throw invalidArg(
      `warmup setting expects ${bytes} bytes, but the data provided from ${data.path} only has ${file.byteLength} bytes`,
    );
  }
  return new Uint8Array(file.subarray(0, bytes));
}

interface PreparedInput {
  readonly name: string;
  readonly datatype: WarmupInput["datatype"];
  /** The shape of one row as the model takes it (a config reshape applied). */
  readonly dims: readonly number[];
  readonly row: Uint8Array | Uint8Array[];
}

function prepare(config: ModelConfig, sample: WarmupSample): PreparedInput[] {
  return sample.inputs.map((input) => {
    const declared = config.inputs.find((i) => i.name === input.name);
    if (declared !== undefined && declared.datatype !== input.datatype) {
      throw invalidArg(
        `input '${input.name}' is ${configTypeName(input.datatype)}, but model '${config.name}' expects ${configTypeName(declared.datatype)}`,
      );
    }
    const sameDims = declared !== undefined && sameShape(declared.dims, input.dims);
    const dims = sameDims && declared.reshape !== undefined ? declared.reshape : input.dims;
    return { name: input.name, datatype: input.datatype, dims, row: rowOf(input) };
  });
}

/** The inputs of one run: `rows` rows (none when the model does not batch), fresh buffers each run. */
function batchOf(inputs: readonly PreparedInput[], rows: number | undefined): Map<string, Tensor> {
  const batch = new Map<string, Tensor>();
  for (const input of inputs) {
    const copies = rows ?? 1;
    const shape = rows === undefined ? [...input.dims] : [rows, ...input.dims];
    let data: TensorData;
    if (Array.isArray(input.row)) {
      data = Array.from({ length: copies }, () => input.row as Uint8Array[]).flat();
    } else {
      const row = input.row;
      const bytes = new Uint8Array(row.byteLength * copies);
      for (let i = 0; i < copies; i++) bytes.set(row, i * row.byteLength);
      data = viewArray(input.datatype as NumericDataType, bytes.buffer, 0, bytes.byteLength);
    }
    batch.set(input.name, { datatype: input.datatype, shape, data });
  }
  return batch;
}

/** Runs every sample on every instance; rejects with Triton's message for the first that fails. */
export async function runWarmup(
  config: ModelConfig,
  executors: readonly ModelExecutor[],
  logger: Logger,
): Promise<void> {
  if (!runsWarmup(config, executors)) return;
  const outputs = config.outputs.map((output) => output.name);
  const batching = config.maxBatchSize > 0;
  for (const sample of config.warmup) {
    let inputs: PreparedInput[];
    try {
      inputs = prepare(config, sample);
    } catch (error) {
      throw invalidArg(`failed to run warmup sample '${sample.name}': ${asServerError(error).message}`);
    }
    for (const executor of executors) {
      for (let iteration = 0; iteration < sample.count; iteration++) {
        // A model that does not batch runs the sample's requests one at a time.
        const runs = batching
          ? [sample.batchSize]
          : Array.from({ length: sample.batchSize }, () => undefined);
        for (const rows of runs) {
          try {
            await executor.run(batchOf(inputs, rows), outputs);
          } catch (error) {
            throw invalidArg(`failed to run warmup sample '${sample.name}': ${asServerError(error).message}`);
          }
        }
      }
      logger.info(
        { event: "warmup", model: config.name, instance: executor.name, sample: sample.name },
        `model '${config.name}' instance '${executor.name}' ran warmup sample '${sample.name}' ${sample.count} time(s)`,
      );
    }
  }
}
