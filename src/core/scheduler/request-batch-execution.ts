import { asServerError } from "../errors.ts";
import type { ExecutionOutcome, ExecutionRequest, RequestExecutor } from "../executor.ts";
import type { ModelStatistics } from "../statistics.ts";
import { ExecutionCount } from "./execution-count.ts";
import type { PendingRequest } from "./pending-request.ts";

// Running one batch of stateless requests on model code that takes requests (a handler):
// each request goes as it is, and is settled by its own outcome, on its own time.

export function executionRequest(pending: PendingRequest): Omit<ExecutionRequest, "sequence"> {
  return {
    request: pending.request,
    inputs: pending.validated.inputs,
    outputNames: pending.validated.outputNames,
    responses: pending.responses,
  };
}

/** Settles `pending` with `outcome`: its response, or its error. */
function settleWith(pending: PendingRequest, outcome: ExecutionOutcome, batchSize: number): void {
  if (!outcome.ok) {
    pending.reject(outcome.error);
    return;
  }
  const { inputNs, inferNs, outputNs } = outcome.timings;
  pending.resolve({
    outputs: outcome.outputs,
    parameters: outcome.parameters,
    timings: pending.timings(inputNs, inferNs, outputNs, batchSize),
  });
}

/** Runs `requests` on `executor`; resolves (never rejects) when the executor can take another batch. */
export async function runRequestBatch(
  executor: RequestExecutor,
  statistics: ModelStatistics,
  requests: readonly PendingRequest[],
): Promise<void> {
  for (const r of requests) r.markDispatched();
  // A batch's rows are its requests' batch dimensions.
  const rows = requests.reduce((sum, r) => sum + r.validated.rows, 0);
  const execution = new ExecutionCount(statistics, rows);
  try {
    const timings = await executor.execute(
      requests.map((r) => ({ ...executionRequest(r), sequence: undefined })),
      (index, outcome) => {
        settleWith(requests[index]!, outcome, rows);
        execution.settled(outcome.ok);
      },
    );
    execution.ran(timings);
  } catch (error) {
    for (const r of requests) r.reject(asServerError(error));
  }
}
