import type ort from "onnxruntime-node";
import { concatAlongAxis } from "../core/batch/tensor-batching.ts";
import { validateRequest } from "../core/request-validation.ts";
import { controlTensors } from "../core/sequence/control-tensors.ts";
import { initialStateTensor } from "../core/sequence/initial-state.ts";
import type { LocalModel } from "./local-model.ts";
import { toOrt } from "./ort-tensor.ts";
import type { Workload } from "./workload.ts";

// The in-process limit: how many rows per second ONNX Runtime alone runs in this process
// at the batch sizes the server actually formed (one intra-op thread, as an instance), so
// a run can say what share of the hardware's speed it reached. Each batch size is timed on
// its own (median of repeated runs); the limit weighs them as the server's histogram does.

interface BatchTiming {
  readonly size: number;
  readonly ms: number;
}

export interface InProcessLimit {
  /** Rows per second at the server's mix of batch sizes. */
  readonly rowsPerSecond: number;
  readonly timings: readonly BatchTiming[];
}

/** The model's inputs for a batch of `size` rows: the workload's first step repeated. */
function batchFeeds(model: LocalModel, workload: Workload, size: number): Record<string, ort.Tensor> {
  const { config } = model;
  const batching = config.maxBatchSize > 0;
  const one = validateRequest(config, {
    id: "",
    inputs: workload.step(0, 0),
    outputs: undefined,
    parameters: {},
    sequence: undefined,
  }).inputs;
  const feeds: Record<string, ort.Tensor> = {};
  for (const input of config.inputs) {
    const tensor = one.get(input.name);
    if (tensor === undefined) continue;
    const repeat = batching && !input.shared;
    feeds[input.name] = toOrt(
      repeat ? concatAlongAxis(Array(size).fill(tensor), input.markedBatchAxis ?? 0) : tensor,
    );
  }
  const sequencing = config.sequenceBatching;
  if (sequencing !== undefined) {
    for (const s of sequencing.states) {
      const initial = initialStateTensor(s);
      feeds[s.inputName] = toOrt(
        s.batchAxis === undefined ? initial : concatAlongAxis(Array(size).fill(initial), s.batchAxis),
      );
    }
    const rows = Array.from({ length: size }, (_, i) => ({ id: BigInt(i + 1), start: false, end: false }));
    for (const [name, tensor] of controlTensors(sequencing.controlInputs, rows, batching))
      feeds[name] = toOrt(tensor);
  }
  return feeds;
}

async function timeBatch(
  model: LocalModel,
  workload: Workload,
  size: number,
  budgetMs: number,
): Promise<number> {
  const feeds = batchFeeds(model, workload, size);
  await model.session.run(feeds); // warm-up
  const times: number[] = [];
  const until = performance.now() + budgetMs;
  while (times.length < 5 || (performance.now() < until && times.length < 2000)) {
    const t0 = performance.now();
    await model.session.run(feeds);
    times.push(performance.now() - t0);
  }
  times.sort((a, b) => a - b);
  return times[Math.floor(times.length / 2)]!;
}

/** `histogram`: executions by batch size, as the server's statistics report them. */
export async function inProcessLimit(
  model: LocalModel,
  workload: Workload,
  histogram: ReadonlyMap<number, number>,
  budgetMsPerSize = 300,
): Promise<InProcessLimit> {
  const sizes = [...histogram.keys()].sort((a, b) => a - b);
  const timings: BatchTiming[] = [];
  let rows = 0;
  let ms = 0;
  for (const size of sizes) {
    const per = await timeBatch(model, workload, size, budgetMsPerSize);
    timings.push({ size, ms: per });
    const executions = histogram.get(size)!;
    rows += size * executions;
    ms += per * executions;
  }
  return { rowsPerSecond: ms === 0 ? 0 : (rows / ms) * 1000, timings };
}
