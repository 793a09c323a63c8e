import { asServerError } from "../errors.ts";
import type { ExecutionOutcome, RequestExecutor } from "../executor.ts";
import { ExecutionCount } from "../scheduler/execution-count.ts";
import type { RequestResult } from "../scheduler/pending-request.ts";
import { executionRequest } from "../scheduler/request-batch-execution.ts";
import { cloneTensor, type Tensor } from "../tensor.ts";
import { keepsSequenceOnCancel } from "./keeps-sequence-on-cancel.ts";
import type { Sequence } from "./sequence.ts";
import {
  answerStep,
  budgetedStep,
  type SequenceModel,
  type SequenceRow,
} from "./sequence-batch-execution.ts";
import { refusedState } from "./state-budget.ts";

// One step of a batch of sequences on model code that takes requests (a handler). Each
// request goes with its sequence's id, flags and state; the state is lent to the executor
// for the step and comes back with the request's outcome, when the store keeps it again.
// A request settles, and its sequence may take its next step, as soon as that request is
// complete, whatever the rest of the batch is doing. Padding rows mean nothing here.

/**
 * The first step of this life of the sequence: a START, or the first request of one opened
 * without a request, or the first after a first step that was not applied (a START that
 * failed, or that an OVMS client gave up on while it ran, gave back no state).
 */
const startsLife = (row: SequenceRow): boolean =>
  row.request.request.sequence?.start === true || row.sequence.applied === 0;

/**
 * Runs the rows as one batch. `rowDone(row)` is called once per row when its request is
 * complete (its sequence may step again). Resolves when the executor can take another
 * batch; never rejects.
 */
export async function runSequenceRequests(
  model: SequenceModel,
  executor: RequestExecutor,
  batch: readonly (SequenceRow | undefined)[],
  rowDone: (row: SequenceRow, outcome: ExecutionOutcome | undefined) => void,
): Promise<void> {
  const rows = batch.filter((r): r is SequenceRow => r !== undefined);
  const { store } = model;
  const startNs = performance.now() * 1e6;
  // A batch's rows are its requests' batch dimensions.
  const batchRows = rows.reduce((sum, row) => sum + row.request.validated.rows, 0);
  const execution = new ExecutionCount(model.statistics, batchRows);
  const settled = new Set<SequenceRow>();
  const finish = (row: SequenceRow, outcome: ExecutionOutcome | undefined): void => {
    if (settled.has(row)) return;
    settled.add(row);
    execution.settled(outcome?.ok === true);
    if (outcome?.ok === false && refusedState(outcome.error.reason)) {
      if (outcome.error.reason === "state_budget") model.budget?.counted();
      if (row.request.request.sequence?.start === true) row.sequence.startNotKept = row.request;
    }
    keepState(model, row.sequence, outcome);
    if (outcome?.ok !== true) {
      rowDone(row, outcome);
      if (outcome !== undefined) row.request.reject(outcome.error);
      return;
    }
    const { inputNs, inferNs, outputNs } = outcome.timings;
    const result: RequestResult = {
      outputs: outcome.outputs,
      parameters: outcome.parameters,
      timings: row.request.timings(inputNs, inferNs, outputNs, batchRows),
    };
    if (model.writeThrough !== undefined) {
      // The sequence steps again once its state is written and the request answered.
      const end = row.request.request.sequence?.end === true;
      void model.writeThrough([{ row, result, end }]).finally(() => rowDone(row, outcome));
      return;
    }
    // State first: the request's settling may let the next step of its sequence run.
    rowDone(row, outcome);
    answerStep(row, result);
  };
  try {
    const requests = rows.map((row) => {
      row.request.markDispatched();
      const start = startsLife(row);
      const request = executionRequest(row.request);
      return {
        ...request,
        // A request whose client's giving up leaves its sequence going on runs to its end
        // once it runs: its model code is not told of the cancel, so its step is applied
        // whole (a retry finds it so), not undone halfway.
        ...(keepsSequenceOnCancel(request.request)
          ? { request: { ...request.request, signal: undefined } }
          : {}),
        // With a shared tier, a step whose sequence another replica advanced meanwhile runs
        // again on the tier's state: it needs its inputs, which the executor may take to its
        // worker's thread, so the executor gets copies.
        ...(model.writeThrough === undefined ? {} : { inputs: copiesOf(request.inputs) }),
        sequence: {
          id: row.sequence.id,
          key: row.sequence.key,
          start,
          end: row.request.request.sequence?.end === true,
          state: start ? undefined : store.get(row.sequence.key),
          // An END's state is freed once it is done: it needs no room.
          ...(model.budget === undefined || row.request.request.sequence?.end === true
            ? {}
            : {
                stateBudget: {
                  roomBytes: model.budget.roomFor(start ? 0 : store.bytesOf(row.sequence.key)),
                  maxBytes: model.budget.maxBytes,
                  step: budgetedStep(model.config.name, row),
                },
              }),
        },
      };
    });
    const timings = await executor.execute(requests, (index, outcome) => finish(rows[index]!, outcome));
    execution.ran(timings);
    model.observer?.batchRan({
      instance: executor.name,
      rows: rows.length,
      executedRows: rows.length,
      resets: rows.filter(startsLife).map((r) => r.sequence.id),
      queueNs: rows.reduce((sum, r) => sum + (r.request.dispatchNs - r.request.arrivalNs), 0),
      computeNs: performance.now() * 1e6 - startNs,
    });
  } catch (error) {
    const failure = asServerError(error);
    for (const row of rows) {
      row.request.reject(failure);
      finish(row, undefined);
    }
  }
}

function copiesOf(inputs: ReadonlyMap<string, Tensor>): Map<string, Tensor> {
  const copies = new Map<string, Tensor>();
  for (const [name, tensor] of inputs) copies.set(name, cloneTensor(tensor));
  return copies;
}

/** The store keeps what the step left (nothing, when the state did not come back). */
function keepState(model: SequenceModel, sequence: Sequence, outcome: ExecutionOutcome | undefined): void {
  const state = outcome?.state;
  if (state === undefined || state.size === 0) model.store.delete(sequence.key);
  else model.store.set(sequence.key, state);
}
