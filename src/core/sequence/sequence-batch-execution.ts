import { concatAlongAxis, splitAlongAxis } from "../batch/tensor-batching.ts";
import { asServerError, internal, ServerError } from "../errors.ts";
import type { ModelExecutor } from "../executor.ts";
import { fromFloat16Array, toFloat16Array } from "../float16.ts";
import type { ModelConfig, StateConfig } from "../model-config.ts";
import {
  clientOutputShape,
  outputBatchAxis,
  requestedOutputNames,
  retryEachAlone,
} from "../scheduler/batch-execution.ts";
import type { BatchObserver } from "../scheduler/batch-observer.ts";
import { nowNs, type PendingRequest, type RequestResult } from "../scheduler/pending-request.ts";
import type { ModelStatistics } from "../statistics.ts";
import { cloneTensor, formatShape, type NumericTensor, type Tensor, zeroTensor } from "../tensor.ts";
import { controlTensors } from "./control-tensors.ts";
import type { Sequence } from "./sequence.ts";
import { formatSequenceId } from "./sequence-parameters.ts";
import { type BudgetedStep, refusedState, refusedStepOutcome, type StateBudget } from "./state-budget.ts";
import type { SequenceState, StateStore } from "./state-store.ts";
import { StepAnswers, stepAnswer } from "./step-answers.ts";

// One step of a batch of sequences: gather each sequence's state into the batch along
// the state's batch axis, add the control tensors, run, then scatter the new state back
// into the store and split the outputs into each request's rows. State never leaves the
// core: clients only see a state tensor that the config also lists as an output.

export interface SequenceRow {
  readonly sequence: Sequence;
  readonly request: PendingRequest;
}

export interface SequenceModel {
  readonly config: ModelConfig;
  readonly statistics: ModelStatistics;
  readonly store: StateStore;
  /** The server's budget of state bytes, for every model's sequences (--max-state-bytes). */
  readonly budget?: StateBudget;
  /** Per state input name: the tensor a START begins from. */
  readonly initialStates: ReadonlyMap<string, NumericTensor>;
  /**
   * For a model whose config gives every state a fixed shape: whether a sequence's state
   * still has those shapes (a model may give it back grown). Sequences whose state does
   * share batches whatever it holds; undefined when shapes vary (each sequence's count).
   */
  readonly laidOut?: (sequenceKey: string) => boolean;
  /** Told about each batch that ran (the model runner's log). */
  readonly observer?: BatchObserver;
  /**
   * With a sequence tier: takes the steps that succeeded (their new state already in the
   * store), writes their state through to the tier, and answers each once it is safe
   * there. Without one, a step is answered at once (answerStep).
   */
  readonly writeThrough?: (steps: readonly StepDone[]) => Promise<void>;
}

/** A step that ran successfully: its row, its answer, and whether it ended its sequence. */
export interface StepDone {
  readonly row: SequenceRow;
  readonly result: RequestResult;
  readonly end: boolean;
}

/** The sequence has applied the step: counted, its answer kept when the request is numbered, and sent. */
export function answerStep(row: SequenceRow, result: RequestResult): void {
  const sequence = row.sequence;
  sequence.applied++;
  const step = row.request.request.sequence?.step;
  // A decoupled request's responses went out as they came: there is no one answer to keep.
  if (step !== undefined && row.request.responses === undefined) {
    sequence.answers ??= new StepAnswers();
    sequence.answers.record(stepAnswer(step, result));
  }
  row.request.resolve(result);
}

/** The first step of a sequence starts it: its START request, or the first one of a sequence opened without a request. */
const isStart = (row: SequenceRow): boolean =>
  row.request.request.sequence?.start === true || row.sequence.steps === 0;

/**
 * `row`'s step as a budget refusal names it: a start (a SageMaker session's opening
 * included) is refused as one, "the sequence is not started", since no sequence was.
 */
export function budgetedStep(model: string, row: SequenceRow): BudgetedStep {
  const control = row.request.request.sequence;
  const starts = isStart(row);
  return {
    model,
    id: starts && control?.id === undefined ? undefined : formatSequenceId(row.sequence.id),
    starts,
  };
}
const isEnd = (row: SequenceRow): boolean => row.request.request.sequence?.end === true;

/** The state a row runs with: fresh on START (or when none was kept), else the stored one (FP32). */
function stateOf(model: SequenceModel, row: SequenceRow, state: StateConfig): Tensor {
  const stored = isStart(row)
    ? undefined
    : (model.store.get(row.sequence.key)?.get(state.inputName) as Tensor | undefined);
  if (stored === undefined) return model.initialStates.get(state.inputName)!;
  if (stored.datatype === "FP16" && state.datatype === "FP32") {
    return { datatype: "FP32", shape: stored.shape, data: fromFloat16Array(stored.data as Uint16Array) };
  }
  return stored;
}

/** The part of a batch key that comes from state: sequences whose state shapes differ cannot share a batch. */
function stateKey(model: SequenceModel, row: SequenceRow): string {
  const states = model.config.sequenceBatching?.states ?? [];
  if (states.length === 0) return "";
  // A START begins from the initial state, which has the config's shapes.
  if (model.laidOut !== undefined && (isStart(row) || model.laidOut(row.sequence.key))) return "";
  let key = "";
  for (const state of states) {
    const stored = isStart(row)
      ? undefined
      : (model.store.get(row.sequence.key)?.get(state.inputName) as Tensor | undefined);
    key += `#${formatShape((stored ?? model.initialStates.get(state.inputName)!).shape)}`;
  }
  return key;
}

export function rowKey(model: SequenceModel, row: SequenceRow): string {
  return row.request.validated.batchKey + stateKey(model, row);
}

function paddingLike(tensor: Tensor, axis: number): Tensor {
  const shape = [...tensor.shape];
  shape[axis] = 1;
  return zeroTensor(tensor.datatype, shape);
}

function gather(parts: (Tensor | undefined)[], axis: number | undefined): Tensor {
  const template = parts.find((p) => p !== undefined)!;
  if (axis === undefined) return cloneTensor(template);
  return concatAlongAxis(
    parts.map((p) => p ?? paddingLike(template, axis)),
    axis,
  );
}

function storedForm(tensor: Tensor, state: StateConfig, fp16: boolean): Tensor {
  if (fp16 && state.datatype === "FP32") {
    return { datatype: "FP16", shape: tensor.shape, data: toFloat16Array(tensor.data as Float32Array) };
  }
  return tensor;
}

export interface StepOutcome {
  /** The step ran and its state was kept (or dropped, for an END). */
  readonly ok: boolean;
  /** With a sequence tier: settles once every row's state is written through and answered. */
  readonly written?: Promise<void>;
}

/**
 * Runs one batch. `batch[i]` is batch row i; `undefined` rows are padding (Direct
 * strategy's empty slots: READY false, CORRID 0, zero inputs and state). Settles every
 * request and updates the store; returns whether the step succeeded.
 */
export async function runSequenceBatch(
  model: SequenceModel,
  executor: ModelExecutor,
  batch: readonly (SequenceRow | undefined)[],
): Promise<StepOutcome> {
  const { config, store } = model;
  const sequencing = config.sequenceBatching!;
  const batching = config.maxBatchSize > 0;
  const real = batch.filter((r): r is SequenceRow => r !== undefined);
  // always_pad_to_max_batch: padding rows as Direct's empty slots (READY false, zero inputs and state).
  const padding = batching && sequencing.padToMaxBatch ? config.maxBatchSize - batch.length : 0;
  const rows = padding > 0 ? [...batch, ...Array.from({ length: padding }, () => undefined)] : batch;
  const startNs = nowNs();
  for (const row of real) row.request.markDispatched();

  let inputs: Map<string, Tensor>;
  let outputNames: string[];
  try {
    inputs = new Map<string, Tensor>();
    const first = real[0]!.request.validated.inputs;
    for (const input of config.inputs) {
      const tensor = first.get(input.name);
      if (tensor === undefined) continue;
      // The first request's own tensor, or a copy when the request may run again after
      // this run, which may take the tensor's memory to another thread: each request of a
      // failed batch runs again alone, and with a shared tier a step whose sequence
      // another replica advanced meanwhile runs again on the tier's state.
      if (input.shared || !batching)
        inputs.set(
          input.name,
          real.length > 1 || model.writeThrough !== undefined ? cloneTensor(tensor) : tensor,
        );
      else
        inputs.set(
          input.name,
          gather(
            rows.map((r) => r?.request.validated.inputs.get(input.name)),
            input.markedBatchAxis ?? 0,
          ),
        );
    }
    for (const state of sequencing.states) {
      inputs.set(
        state.inputName,
        gather(
          rows.map((r) => (r === undefined ? undefined : stateOf(model, r, state))),
          state.batchAxis,
        ),
      );
    }
    const controls = controlTensors(
      sequencing.controlInputs,
      rows.map((r) =>
        r === undefined ? undefined : { id: r.sequence.id, start: isStart(r), end: isEnd(r) },
      ),
      batching,
    );
    for (const [name, tensor] of controls) inputs.set(name, tensor);
    outputNames = requestedOutputNames(
      config,
      real.map((r) => r.request),
      sequencing.states.map((s) => s.outputName),
    );
  } catch (error) {
    return fail(model, real, asServerError(error));
  }

  const assembledNs = nowNs();
  let result: Awaited<ReturnType<ModelExecutor["run"]>>;
  try {
    result = await executor.run(inputs, outputNames);
  } catch (error) {
    const failure = asServerError(error);
    if (retryEachAlone(failure, real.length)) return runEachAlone(model, executor, real);
    return fail(model, real, failure);
  }

  const scatterStartNs = nowNs();
  const ones = rows.map(() => 1);
  const perRow: (Map<string, Tensor> | undefined)[] = rows.map((r) =>
    r === undefined ? undefined : new Map(),
  );
  const newStates: (Map<string, Tensor> | undefined)[] = rows.map((r) =>
    r === undefined ? undefined : new Map(),
  );
  try {
    for (const state of sequencing.states) {
      const output = result.outputs.get(state.outputName);
      if (output === undefined) {
        throw internal(`model '${config.name}' did not produce state output '${state.outputName}'`);
      }
      // Views where the batch axis allows: the store copies what it keeps.
      const pieces = state.batchAxis === undefined ? [output] : splitAlongAxis(output, state.batchAxis, ones);
      for (let i = 0; i < rows.length; i++) {
        newStates[i]?.set(state.inputName, storedForm(pieces[i]!, state, sequencing.storeStatesAsFp16));
      }
    }
    for (const name of outputNames) {
      const output = result.outputs.get(name);
      if (output === undefined) continue;
      const state = sequencing.states.find((s) => s.outputName === name);
      const axis =
        state !== undefined ? state.batchAxis : batching ? outputBatchAxis(config, name) : undefined;
      const pieces = axis === undefined ? [output] : splitAlongAxis(output, axis, ones);
      for (let i = 0; i < rows.length; i++) {
        const row = rows[i];
        if (row?.request.validated.outputNames.includes(name)) {
          perRow[i]!.set(name, clientOutputShape(config, name, pieces[i]!));
        }
      }
    }
  } catch (error) {
    return fail(model, real, asServerError(error));
  }

  const refused = new Set<SequenceRow>();
  for (let i = 0; i < rows.length; i++) {
    const row = rows[i];
    if (row === undefined) continue;
    if (isEnd(row)) store.delete(row.sequence.key);
    else if (sequencing.states.length > 0) {
      const state = newStates[i] as SequenceState;
      const bytes = store.bytesFor(state);
      // A state the store cannot keep (too large for the model or for the server's budget,
      // or not the type its config gives) fails its step; the state stays as it was. One
      // the model gave in other shapes than the config's is kept as it is, as Triton does.
      let refusal =
        stateTooLarge(config.name, row, bytes, sequencing.stateMaxBytes) ??
        model.budget?.refusal(store.bytesOf(row.sequence.key), bytes, () => budgetedStep(config.name, row));
      if (refusal === undefined) {
        try {
          store.set(row.sequence.key, state);
        } catch (error) {
          refusal = asServerError(error);
        }
      }
      if (refusal !== undefined) {
        row.request.reject(refusal);
        refused.add(row);
        if (refusedState(refusal.reason) && row.request.request.sequence?.start === true) {
          row.sequence.startNotKept = row.request;
        }
      }
    }
  }
  const endNs = nowNs();
  const inputNs = assembledNs - startNs + result.timings.inputNs;
  const outputNs = endNs - scatterStartNs + result.timings.outputNs;
  const batchSize = batching ? rows.length : 1;
  model.statistics.recordExecution(batchSize, inputNs, result.timings.inferNs, outputNs);
  model.observer?.batchRan({
    instance: executor.name,
    rows: real.length,
    executedRows: batchSize,
    resets: real.filter(isStart).map((r) => r.sequence.id),
    queueNs: real.reduce((sum, r) => sum + (r.request.dispatchNs - r.request.arrivalNs), 0),
    computeNs: endNs - startNs,
  });
  // With a tier the answers wait for the state to be written; without one they go now.
  const toWrite: StepDone[] | undefined = model.writeThrough === undefined ? undefined : [];
  for (let i = 0; i < rows.length; i++) {
    const row = rows[i];
    if (row === undefined || refused.has(row)) continue;
    const answer: RequestResult = {
      outputs: perRow[i]!,
      parameters: {},
      timings: row.request.timings(
        inputNs,
        result.timings.inferNs,
        outputNs,
        batchSize,
        result.timings.waitNs,
      ),
    };
    if (toWrite === undefined) answerStep(row, answer);
    else toWrite.push({ row, result: answer, end: isEnd(row) });
  }
  // Nothing to write when every row was refused.
  if (toWrite === undefined || toWrite.length === 0) return { ok: true };
  return { ok: true, written: model.writeThrough!(toWrite) };
}

/** The error for a step whose state of `bytes` would pass `maxBytes`; undefined when it fits. */
function stateTooLarge(
  model: string,
  row: SequenceRow,
  bytes: number,
  maxBytes: number | undefined,
): ServerError | undefined {
  if (maxBytes === undefined || bytes <= maxBytes) return undefined;
  return new ServerError(
    "RESOURCE_EXHAUSTED",
    `the state of sequence ${formatSequenceId(row.sequence.id)} of model '${model}' would hold ${bytes} bytes, more than its sequence_state_max_bytes (${maxBytes}): ${refusedStepOutcome(isStart(row))}`,
    { reason: "state_bound" },
  );
}

/**
 * Runs each row as a batch of its own (after a batch's run failed, perhaps for one row's
 * data): every sequence's state is still as it was before the failed run.
 */
async function runEachAlone(
  model: SequenceModel,
  executor: ModelExecutor,
  rows: readonly SequenceRow[],
): Promise<StepOutcome> {
  const written: Promise<void>[] = [];
  let ok = false;
  for (const row of rows) {
    const outcome = await runSequenceBatch(model, executor, [row]);
    ok ||= outcome.ok;
    if (outcome.written !== undefined) written.push(outcome.written);
  }
  return written.length === 0 ? { ok } : { ok, written: Promise.all(written).then(() => {}) };
}

/** A failed step keeps every sequence's previous state, except that an END still frees it. */
function fail(
  model: SequenceModel,
  rows: readonly SequenceRow[],
  error: ReturnType<typeof asServerError>,
): StepOutcome {
  for (const row of rows) {
    if (isEnd(row)) model.store.delete(row.sequence.key);
    row.request.reject(error);
  }
  return { ok: false };
}
