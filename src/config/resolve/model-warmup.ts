import { join } from "node:path";
import { elementByteSize, fromConfigTypeName } from "../../core/datatype.ts";
import type { WarmupData, WarmupInput, WarmupSample } from "../../core/model-config.ts";
import { isParsedMessage } from "../parsed-config.ts";
import { MessageNode } from "./config-node.ts";
import { fileInFolder } from "./file-in-folder.ts";

// Triton's `model_warmup`: samples run on every instance before the model is ready, so
// the first requests do not pay for the runtime's first runs, and a model that cannot
// run them fails to load. Checked here as Triton checks them when it prepares them; run
// by the repository (src/repository/model-warmup-run.ts).

/** Triton reads a sample's files from this folder of the model's. */
const WARMUP_FOLDER = "warmup";

/**
 * What one run of a sample may hold, all its rows and inputs (an element of a BYTES input
 * counted as 4 bytes, its length): the default limit of a request body. Checked before
 * anything is allocated, as a config may come from a load request.
 */
const MAX_SAMPLE_BYTES = 64 * 1024 * 1024;

function warmupData(input: MessageNode, name: string, modelDir: string): WarmupData {
  // The oneof's member set is what counts (Triton reads input_data_type_case), not its value.
  if (input.has("zero_data")) return { kind: "zero" };
  if (input.has("random_data")) return { kind: "random" };
  const file = input.string("input_data_file");
  if (file !== "") {
    const path = fileInFolder(join(modelDir, WARMUP_FOLDER), file);
    if (path === undefined)
      input.fail(
        "input_data_file",
        `warmup input '${name}' must name a file in the model's '${WARMUP_FOLDER}' folder`,
      );
    return { kind: "file", path };
  }
  return input.fail(undefined, `warmup setting expects input '${name}' to have input_data_type set`);
}

function warmupInput(input: MessageNode, name: string, modelDir: string): WarmupInput {
  const typeName = input.string("data_type", "TYPE_INVALID");
  const datatype = fromConfigTypeName(typeName);
  if (datatype === undefined)
    input.fail(
      "data_type",
      `warmup input '${name}' has data type ${typeName}, which is not a tensor data type`,
    );
  const dims = input.safeNumbers("dims");
  if (dims.some((dim) => dim < 0))
    input.fail(
      "dims",
      `warmup setting expects all variable-size dimensions are specified for input '${name}'`,
    );
  return { name, datatype, dims, data: warmupData(input, name, modelDir) };
}

export function resolveModelWarmup(root: MessageNode, modelDir: string): WarmupSample[] {
  const maxBatchSize = root.number("max_batch_size");
  const samples: WarmupSample[] = [];
  for (const sample of root.children("model_warmup")) {
    const name = sample.string("name");
    const batchSize = sample.number("batch_size");
    // Triton skips a sample of batch size 0.
    if (batchSize === 0) continue;
    if (maxBatchSize > 0 && batchSize > maxBatchSize)
      sample.fail(
        "batch_size",
        `warmup sample '${name}' has batch_size ${batchSize}, more than the max_batch_size of model '${root.ctx.modelName}', ${maxBatchSize}`,
      );
    const inputs = Object.entries(sample.map("inputs")).map(([inputName, value]) => {
      const input = isParsedMessage(value) ? value : {};
      return warmupInput(
        new MessageNode(root.ctx, input, `${sample.path}.inputs[${inputName}]`),
        inputName,
        modelDir,
      );
    });
    // A model that does not batch runs the sample's requests one at a time.
    const rows = maxBatchSize > 0 ? batchSize : 1;
    const bytes = inputs.reduce(
      (sum, input) =>
        sum + rows * input.dims.reduce((n, dim) => n * dim, 1) * (elementByteSize(input.datatype) ?? 4),
      0,
    );
    if (bytes > MAX_SAMPLE_BYTES)
      sample.fail(
        undefined,
        `warmup sample '${name}' would take ${bytes} bytes a run, more than the ${MAX_SAMPLE_BYTES} a sample may`,
      );
    samples.push({ name, batchSize, count: Math.max(1, sample.number("count")), inputs });
  }
  return samples;
}
