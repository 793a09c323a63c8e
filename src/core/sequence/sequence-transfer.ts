import type { SequenceId } from "../infer.ts";
import type { SequenceEndReason } from "../model.ts";
import type { SequenceBatchingConfig } from "../model-config.ts";
import type { PendingRequest } from "../scheduler/pending-request.ts";
import { formatShape } from "../tensor.ts";
import type { ModelTier } from "./sequence-tier.ts";
import type { SequenceState } from "./state-store.ts";
import type { StepAnswers } from "./step-answers.ts";

// Sequences leaving one sequence batcher for another: a model reloaded with a new
// configuration or new files keeps its live sequences when their state fits the new
// version. A sequence travels as its id, its state, and the requests it has accepted and
// not run; nothing about it ends. Whether state fits is decided by the state signature:
// the state tensors' names, datatypes and shapes (the batch axis included).

export interface TransferredSequence {
  readonly id: SequenceId;
  /** The id still answers to this sequence (false once its END was accepted, or it was restarted). */
  readonly live: boolean;
  /** Why it is ending, when it is (its END is queued, or it was ended and has work left). */
  readonly endReason: SequenceEndReason | undefined;
  /** Its state as the store kept it; undefined before its first step. */
  readonly state: SequenceState | undefined;
  /** Accepted requests not yet run, in arrival order. */
  readonly requests: readonly PendingRequest[];
  readonly steps: number;
  /** Steps applied, and the answers kept for numbered retries (sequence_step). */
  readonly applied?: number;
  readonly answers?: StepAnswers | undefined;
  readonly createdMs: number;
  /** When its idle clock started (its last arrival, or when it got its slot): the move does not restart it. */
  readonly lastArrivalMs?: number;
  /** When the sequence expires (a session's TTL), if it does. */
  readonly expiresAtMs: number | undefined;
  /** For a sequence waiting in the backlog: when its START's timeout ends the wait, if it has one. */
  readonly backlogDeadlineMs?: number | undefined;
  /** The caller it belongs to (see Sequence.owner). */
  readonly owner: string | undefined;
  /** With a shared tier: which records it is in, its life, the version it last read or wrote, and whether the tier holds its end (or must not be sent one). */
  readonly tier?: {
    /** The records that hold its record (those of the version it was last written in). */
    readonly source: ModelTier;
    readonly life: string;
    readonly version: number | undefined;
    readonly ended: boolean;
  };
}

export interface SequenceTransfer {
  readonly signature: string;
  /** In the order the sequences started. */
  readonly sequences: readonly TransferredSequence[];
  /** The giver's ends by reason, so the counts go on across the reload. */
  readonly ended: Readonly<Record<SequenceEndReason, number>>;
}

/**
 * What a sequence's state must agree on to move: per state tensor, its names, datatype (as
 * stored: FP16 when FP32 state is kept as FP16), dims and batch axis.
 */
export function stateSignature(sequencing: SequenceBatchingConfig): string {
  return [...sequencing.states]
    .sort((a, b) => (a.inputName < b.inputName ? -1 : a.inputName > b.inputName ? 1 : 0))
    .map((s) => {
      const stored = sequencing.storeStatesAsFp16 && s.datatype === "FP32" ? "FP16" : s.datatype;
      return `${s.inputName}->${s.outputName}:${stored}${formatShape(s.dims)}@${s.batchAxis ?? "none"}`;
    })
    .join(" ");
}

/** Sequences that ended in a handover instead of moving, and why. */
export interface HandoverEnd {
  readonly count: number;
  readonly reason: string;
}

/**
 * How a handover went: the sequences the new version took over, and those that ended
 * instead (their state did not fit; the new version had no room for them, or already held
 * a live sequence of their id), one group per reason.
 */
export interface HandoverResult {
  readonly moved: number;
  readonly ended: readonly HandoverEnd[];
}
