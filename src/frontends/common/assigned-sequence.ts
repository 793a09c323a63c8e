import type { InferRequest, InferResponse, SequenceId } from "../../core/infer.ts";
import type { ServedModel } from "../../core/model.ts";

// A START sent without an id is given one by the server, and only its answer tells the
// client which (its `sequence_id` parameter). An answer that is not delivered (a gRPC
// stream closed, or ended for want of budget) leaves a sequence nobody can reach, holding
// its slot and state until its idle timeout: the frontend ends it, as cancelled. A
// sequence whose client named its id goes on as the step left it, as in Triton: its
// client can reach it.

/** The sequence the server gave a START sent without an id. */
export interface AssignedSequence {
  readonly model: ServedModel;
  readonly id: SequenceId;
}

/** The sequence the server gave `request`, a START sent without an id, as its answer names it; undefined for any other answer. */
export function assignedSequence(
  model: ServedModel | undefined,
  request: InferRequest | undefined,
  response: InferResponse,
): AssignedSequence | undefined {
  if (model?.sequences === undefined || request?.sequence === undefined || request.sequence.id !== undefined)
    return undefined;
  const id = response.parameters.sequence_id;
  return typeof id === "bigint" || (typeof id === "string" && id !== "") ? { model, id } : undefined;
}

/** Its answer did not reach its client: the sequence, which nobody can reach, ends. */
export function endUnreachable(assigned: AssignedSequence | undefined): void {
  if (assigned === undefined) return;
  const ended = assigned.model.sequences?.end(assigned.id, "cancelled");
  if (ended instanceof Promise) ended.catch(() => {});
}
