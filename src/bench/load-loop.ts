import type { Tensor } from "../core/tensor.ts";
import {
  type BenchClient,
  type BenchSequence,
  retryable,
  StepError,
  type StepFlags,
} from "./clients/bench-client.ts";
import { LatencyRecorder } from "./latency.ts";
import { RateSchedule } from "./rate-schedule.ts";
import type { Workload } from "./workload.ts";

// The load: `lanes` loops, each sending one request at a time. For a sequence model a lane
// runs sequences of `sequenceLength` steps one after another (the last step ends the
// sequence), so `lanes` sequences are live at once. Closed loop: a lane sends its next step
// when the last one is answered. Open loop (`rate`): each request is due at its slot of a
// RateSchedule, and its latency counts from then. Every request due inside the measured
// window counts, however late it is sent or answered (dropping the late ones would drop
// the slowest and bias the tail low); at the end each lane ends its open sequence, as it
// ends one it gives up after a failed step.

/** Retries of one numbered step after failures that allow it (a replica lost, a 503). */
const STEP_RETRIES = 5;

/**
 * One step; a numbered step of a sequence that failed in a way that allows it is sent
 * again, as the example clients do: the server answers it from its recorded answer if the
 * first attempt was applied, so it is never applied twice. The latency counts the retries.
 */
async function stepWithRetries(
  client: BenchClient,
  sequence: BenchSequence,
  inputs: ReadonlyMap<string, Tensor>,
  flags: StepFlags,
  stateful: boolean,
): Promise<Map<string, Tensor>> {
  for (let attempt = 0; ; attempt++) {
    try {
      return await client.step(sequence, inputs, flags);
    } catch (error) {
      if (!stateful || !(error instanceof StepError) || !retryable(error) || attempt >= STEP_RETRIES)
        throw error;
      await new Promise((resolve) => setTimeout(resolve, 20 * (attempt + 1)));
    }
  }
}

/**
 * Ends a sequence the lane gives up after a failed step, unmeasured: an END step without a
 * step number (the failed one may or may not count as applied), whatever its outcome, since
 * the server ends a sequence at its END request whether or not the model runs it. Left
 * open, each would hold a sequence slot until the server's idle timeout: against a model
 * that failed every step, the slots filled and new sequences waited that long.
 */
async function endGivenUp(
  client: BenchClient,
  sequence: BenchSequence,
  inputs: ReadonlyMap<string, Tensor>,
): Promise<void> {
  try {
    await client.step(sequence, inputs, { start: false, end: true });
  } catch {
    // Refused or failed, the sequence is over either way (or never began).
  }
}

export interface LoadOptions {
  readonly lanes: number;
  /** Steps per sequence; undefined for a stateless model. */
  readonly sequenceLength: number | undefined;
  /** Requests per second over all lanes; undefined = closed loop. */
  readonly rate: number | undefined;
  readonly seconds: number;
  readonly warmupSeconds: number;
  /** A random base for sequence ids, so runs against one server never collide. */
  readonly idBase: bigint;
  /** Keep every answer for the oracle check. */
  readonly keepOutputs: boolean;
  /** Called about once a second with the answers so far in the window. */
  readonly progress?: (elapsedSeconds: number, answered: number, recorder: LatencyRecorder) => void;
}

/** One request the run sent and what came back (kept when checking against the oracle). */
export interface Exchange {
  readonly sequence: number;
  /** The sequence id the server saw (undefined for a stateless model). */
  readonly id: bigint | undefined;
  readonly step: number;
  readonly end: boolean;
  readonly outputs: Map<string, Tensor>;
}

export interface LoadResult {
  readonly recorder: LatencyRecorder;
  /** Length of the measured window, in seconds. */
  readonly seconds: number;
  /**
   * Answers that came inside the window, whenever their requests were due: the throughput.
   * The latencies are those of the requests due in the window, however late answered
   * (behind an open loop, up to another window later), which would overstate it: their
   * answers took longer than the window to come. A request due in the warm-up and answered
   * in the window counts here instead.
   */
  readonly answeredInWindow: number;
  readonly exchanges: Exchange[];
  /** Sequences started (for a sequence model). */
  readonly sequences: number;
}

/** The failure kind of a window's slot an open-loop lane never sent (the server was too slow). */
export const NOT_SENT = "not sent: behind schedule";

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

export async function runLoad(
  client: BenchClient,
  workload: Workload,
  options: LoadOptions,
): Promise<LoadResult> {
  const recorder = new LatencyRecorder();
  const exchanges: Exchange[] = [];
  const stateful = options.sequenceLength !== undefined;
  const start = performance.now();
  const measureFrom = start + options.warmupSeconds * 1000;
  const end = measureFrom + options.seconds * 1000;
  let nextSequence = 0;
  let lastProgress = measureFrom;
  let answeredInWindow = 0;

  const newSequence = (lane: number): BenchSequence => {
    const index = stateful ? nextSequence++ : lane;
    return { index, id: stateful ? options.idBase + BigInt(index) : undefined };
  };

  const lane = async (laneIndex: number): Promise<void> => {
    let sequence = newSequence(laneIndex);
    let step = 0;
    const schedule =
      options.rate === undefined
        ? undefined
        : new RateSchedule({ lanes: options.lanes, lane: laneIndex, rate: options.rate, start, measureFrom });
    for (;;) {
      let due = performance.now();
      if (schedule !== undefined) {
        due = schedule.next(due);
        const wait = due - performance.now();
        if (wait > 0) await sleep(wait);
      }
      // An open-loop lane still sends the slots due inside the window after it closes
      // (they are the slowest: leaving them out would bias the tail low), for at most
      // another window's length; the slots it still has not sent by then count as failed.
      let finishing = due >= end;
      if (!finishing && schedule !== undefined && performance.now() >= end + options.seconds * 1000) {
        const unsent = schedule.slotsLeftBefore(end);
        for (let i = 0; i < unsent; i++) recorder.fail(NOT_SENT);
        finishing = true;
        due = end; // an open sequence is still ended, unmeasured
      }
      // After the window only open sequences are ended; a stateless lane just stops.
      if (finishing && (!stateful || step === 0)) return;
      const last = stateful && (finishing || step === options.sequenceLength! - 1);
      const flags = { start: stateful && step === 0, end: last, ...(stateful ? { step: step + 1 } : {}) };
      const inputs = workload.step(sequence.index, step);
      const measured = due >= measureFrom && due < end;
      try {
        const outputs = await stepWithRetries(client, sequence, inputs, flags, stateful);
        const now = performance.now();
        if (measured) recorder.record(now - due);
        if (now >= measureFrom && now < end) answeredInWindow++;
        if (options.keepOutputs)
          exchanges.push({ sequence: sequence.index, id: sequence.id, step, end: last, outputs });
        step++;
      } catch (error) {
        if (measured) {
          recorder.fail(
            error instanceof StepError ? error.kind : "client error",
            error instanceof Error ? error.message : String(error),
          );
        }
        if (!(error instanceof StepError)) throw error;
        // A sequence whose step failed is given up: the lane ends it and starts a new one.
        if (stateful && !last) await endGivenUp(client, sequence, inputs);
        step = stateful ? options.sequenceLength! : step;
      }
      if (finishing && stateful) return;
      if (stateful && step >= options.sequenceLength!) {
        sequence = newSequence(laneIndex);
        step = 0;
      }
      if (
        options.progress !== undefined &&
        performance.now() - lastProgress >= 1000 &&
        performance.now() > measureFrom
      ) {
        lastProgress = performance.now();
        options.progress((lastProgress - measureFrom) / 1000, recorder.count, recorder);
      }
    }
  };

  await Promise.all(Array.from({ length: options.lanes }, (_, i) => lane(i)));
  return {
    recorder,
    seconds: options.seconds,
    answeredInWindow,
    exchanges,
    sequences: nextSequence,
  };
}
