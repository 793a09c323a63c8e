import { concatAlongAxis, splitAlongAxis } from "../batch/tensor-batching.ts";
import { asServerError, type ServerError } from "../errors.ts";
import type { ModelExecutor } from "../executor.ts";
import type { ModelConfig } from "../model-config.ts";
import { reshaped } from "../request-validation.ts";
import type { ModelStatistics } from "../statistics.ts";
import { cloneTensor, type Tensor } from "../tensor.ts";
import { nowNs, type PendingRequest } from "./pending-request.ts";

// Running one batch of stateless requests: concatenate their inputs along the batch
// axis, run, split the outputs back into per-request views, and account for the time.

/** The model-facing batch inputs of `requests` (all share a batch key). */
function concatRequestInputs(config: ModelConfig, requests: readonly PendingRequest[]): Map<string, Tensor> {
  const inputs = new Map<string, Tensor>();
  const first = requests[0]!;
  // A request alone runs once (nothing runs it again): the run may take its tensors.
  if (requests.length === 1) return new Map(first.validated.inputs);
  for (const input of config.inputs) {
    const tensor = first.validated.inputs.get(input.name);
    if (tensor === undefined) continue;
    if (input.shared) {
      // A copy: the run may take the tensor's memory (to another thread), and should the
      // batch fail, each request runs again alone with its own.
      inputs.set(input.name, cloneTensor(tensor));
      continue;
    }
    inputs.set(
      input.name,
      concatAlongAxis(
        requests.map((r) => r.validated.inputs.get(input.name)!),
        input.markedBatchAxis ?? 0,
      ),
    );
  }
  return inputs;
}

/**
 * Whether a batch's failed run may be one request's doing (a value the model cannot
 * take, such as an index out of range): then each request is run again alone, so that
 * only the one at fault fails, and the others are answered. Not when the run was refused
 * before it began (UNAVAILABLE: the instance is not loaded, the server stops) or was
 * cancelled. A worker that stopped during the run (INTERNAL) counts too: should one
 * request have stopped it, running each alone finds which. The cost falls on failures
 * only: a model that fails every run runs a batch of N again N times.
 */
export function retryEachAlone(failure: ServerError, requests: number): boolean {
  return requests > 1 && (failure.code === "INVALID_ARG" || failure.code === "INTERNAL");
}

/** The axis of a batched model output along which its rows are split back into requests. */
export function outputBatchAxis(config: ModelConfig, name: string): number {
  return config.outputs.find((o) => o.name === name)?.markedBatchAxis ?? 0;
}

/** Every output any of the requests asked for, in config order. */
export function requestedOutputNames(
  config: ModelConfig,
  requests: readonly PendingRequest[],
  extra: readonly string[] = [],
): string[] {
  const wanted = new Set<string>(extra);
  for (const r of requests) for (const name of r.validated.outputNames) wanted.add(name);
  const names = config.outputs.map((o) => o.name).filter((n) => wanted.has(n));
  for (const name of extra) if (!names.includes(name)) names.push(name);
  return names;
}

/**
 * The client's shape for a model output: the model may produce the output in its
 * `reshape` shape; clients see the configured `dims` (with the batch dim when batching).
 */
export function clientOutputShape(config: ModelConfig, name: string, tensor: Tensor): Tensor {
  const output = config.outputs.find((o) => o.name === name);
  // Batched along a marked dimension: the client's tensor has Triton's leading batch of 1.
  if (output?.markedBatchAxis !== undefined && config.maxBatchSize > 0) {
    return { ...tensor, shape: [1, ...tensor.shape] };
  }
  if (output?.reshape === undefined) return tensor;
  const batching = config.maxBatchSize > 0;
  const shape = batching ? tensor.shape.slice(1) : tensor.shape;
  const free = output.dims.filter((d) => d === -1).length;
  let dims: number[];
  if (free === output.reshape.filter((d) => d === -1).length) {
    dims = reshaped(output.reshape, output.dims, shape);
  } else {
    // Variable dimensions that do not pair up (a reshape with none of them, say): at most
    // one in dims, which takes what the known ones leave.
    let perRow = 1;
    for (const d of shape) perRow *= d;
    let known = 1;
    for (const d of output.dims) if (d !== -1) known *= d;
    dims = output.dims.map((d) => (d === -1 ? perRow / known : d));
  }
  return { ...tensor, shape: batching ? [tensor.shape[0]!, ...dims] : dims };
}

/**
 * Runs `requests` as one batch on `executor` and settles each of them: each gets views
 * of its own rows of every output it asked for.
 */
export async function runStatelessBatch(
  config: ModelConfig,
  executor: ModelExecutor,
  statistics: ModelStatistics,
  requests: readonly PendingRequest[],
): Promise<void> {
  const startNs = nowNs();
  for (const r of requests) r.markDispatched();
  const batching = config.maxBatchSize > 0;
  let inputs: Map<string, Tensor>;
  let outputNames: string[];
  try {
    inputs = concatRequestInputs(config, requests);
    outputNames = requestedOutputNames(config, requests);
  } catch (error) {
    for (const r of requests) r.reject(asServerError(error));
    return;
  }
  const assembledNs = nowNs();
  let result: Awaited<ReturnType<ModelExecutor["run"]>>;
  try {
    result = await executor.run(inputs, outputNames);
  } catch (error) {
    const failure = asServerError(error);
    if (retryEachAlone(failure, requests.length)) {
      for (const r of requests) await runStatelessBatch(config, executor, statistics, [r]);
      return;
    }
    for (const r of requests) r.reject(failure);
    return;
  }
  const splitStartNs = nowNs();
  const rows = requests.map((r) => r.validated.rows);
  const perRequest: Map<string, Tensor>[] = requests.map(() => new Map());
  for (const name of outputNames) {
    const output = result.outputs.get(name);
    if (output === undefined) continue;
    const pieces = batching ? splitAlongAxis(output, outputBatchAxis(config, name), rows) : [output];
    for (let i = 0; i < requests.length; i++) {
      if (requests[i]!.validated.outputNames.includes(name)) {
        perRequest[i]!.set(name, clientOutputShape(config, name, pieces[i]!));
      }
    }
  }
  const endNs = nowNs();
  const inputNs = assembledNs - startNs + result.timings.inputNs;
  const outputNs = endNs - splitStartNs + result.timings.outputNs;
  const totalRows = rows.reduce((a, b) => a + b, 0);
  const batchSize = batching ? totalRows : 1;
  statistics.recordExecution(batchSize, inputNs, result.timings.inferNs, outputNs);
  for (let i = 0; i < requests.length; i++) {
    const r = requests[i]!;
    r.resolve({
      outputs: perRequest[i]!,
      parameters: {},
      timings: r.timings(inputNs, result.timings.inferNs, outputNs, batchSize, result.timings.waitNs),
    });
  }
}
