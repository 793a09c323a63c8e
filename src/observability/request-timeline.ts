import type { RequestRecord } from "../core/scheduler/request-observer.ts";

// A request's life as points in time (ns, `performance.now()` clock), for the traces:
// arrival; the hand-off of its batch to a model instance; the model execution, which
// ends the batch's time (what comes before it in the batch is the hand-off and any wait
// for the instance), split where its input work ends and its output work starts; the end.

export interface RequestTimeline {
  readonly startNs: number;
  readonly dispatchNs: number;
  readonly computeStartNs: number;
  readonly computeInputEndNs: number;
  readonly computeOutputStartNs: number;
  readonly endNs: number;
}

/** undefined for a request that failed before it ran. */
export function requestTimeline(record: RequestRecord): RequestTimeline | undefined {
  const { timings } = record;
  if (timings === undefined) return undefined;
  const startNs = record.arrivalNs;
  const endNs = startNs + record.totalNs;
  const dispatchNs = startNs + timings.queueNs;
  const { computeInputNs, computeInferNs, computeOutputNs } = timings;
  const computeStartNs = Math.max(dispatchNs, endNs - computeInputNs - computeInferNs - computeOutputNs);
  return {
    startNs,
    dispatchNs,
    computeStartNs,
    computeInputEndNs: Math.min(endNs, computeStartNs + computeInputNs),
    computeOutputStartNs: Math.max(computeStartNs, endNs - computeOutputNs),
    endNs,
  };
}
