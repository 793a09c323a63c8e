import type { ServerError } from "../errors.ts";
import type { SequenceId } from "../infer.ts";
import type { SequenceEndReason } from "../model.ts";
import type { PendingRequest } from "../scheduler/pending-request.ts";
import { Deque } from "../scheduler/request-queue.ts";
import type { ModelTier } from "./sequence-tier.ts";
import type { SequenceState } from "./state-store.ts";
import type { StepAnswers } from "./step-answers.ts";

/** Where a sequence's requests run: one slot of one model instance. */
export interface SlotHolder {
  /** Instance name, e.g. "silero_vad_0". */
  readonly instanceName: string;
  /** Called when the sequence has work that may run. */
  wake(sequence: Sequence): void;
  /** The sequence leaves the slot (it ended); the slot may be given to another. */
  release(sequence: Sequence, slot: number): void;
  /** The slot passes from `sequence` to `successor` (a restart keeps its slot). */
  handOver(sequence: Sequence, successor: Sequence): void;
  /** `sequence` ended (its last step is done); its state comes along, before the core frees it. */
  sequenceEnded(sequence: Sequence, reason: SequenceEndReason, state: SequenceState | undefined): void;
}

export type SequenceStatus = "backlogged" | "active" | "ending";

/** Where a sequence stands in a sequence tier (sequence-tier.ts), when the model has one. */
export interface TierPlace {
  /** The token of this life in the tier. */
  life: string;
  /** The record's version this replica last read or wrote; undefined: not in the tier yet. */
  version: number | undefined;
  /** Being read from the tier: the sequence does not run meanwhile. */
  loading: boolean;
  /** The tier's record must be read before the next step (a write failed, or a retry needs the truth). */
  stale: boolean;
  /** The tier already holds the end (the END step wrote it, or it ended on another replica). */
  ended: boolean;
  /** Just read from the tier: a retried step may be judged by what this replica holds. */
  verified: boolean;
  /** The sequence leaves this replica but goes on (a hand-over): its end here is not an end. */
  leaving: boolean;
  /**
   * The records of another version of the model that still hold the sequence's record: a
   * reload moved the sequence to this version, and its record moves with it before its
   * next step (the batcher's #moveRecord). Until then, ends and renewals go there.
   */
  movingFrom?: ModelTier | undefined;
  /** A client's close or an operator's end, waiting for the tier to hold the end (settled when it does, or cannot). */
  closing?: { readonly resolve: () => void; readonly reject: (error: ServerError) => void };
}

let nextToken = 0;

/**
 * One life of one sequence: from its start to its end. A start on an id that is already
 * live begins a new Sequence (the old one ends with reason "restart" and hands its slot
 * over once its queued requests have run).
 */
export class Sequence {
  readonly id: SequenceId;
  /** Unique to this life: the state store key. */
  readonly key = `seq-${++nextToken}`;
  /** When the sequence started (kept when it moves to a reloaded version of its model). */
  readonly createdMs: number;
  lastArrivalMs = Date.now();
  status: SequenceStatus = "backlogged";
  /** Why the sequence is ending, decided when its id was released. */
  endReason: SequenceEndReason | undefined;
  /** Accepted requests that have not been handed to an instance, in arrival order. */
  readonly queue = new Deque<PendingRequest>();
  /** A request of this sequence is running. */
  running = false;
  steps = 0;
  holder: SlotHolder | undefined;
  slot: number | undefined;
  /** The sequence that restarted this id; it takes over the slot when this one is done. */
  successor: Sequence | undefined;
  /**
   * A restart's new life whose old life holds (or will take over) a slot: it waits for
   * that slot, not in the backlog, so no backlog timeout applies to it.
   */
  takesOverSlot = false;
  /** Backlog `timeout` expiry (epoch ms), when the start request set one. */
  backlogDeadlineMs: number | undefined;
  /** When the sequence ends by itself (epoch ms), when it was opened with an expiry. */
  expiresAtMs: number | undefined;
  /** Steps applied in this life (those that succeeded): what a request's `sequence_step` counts. */
  applied = 0;
  /**
   * A START that ran but whose state the server's budget had no room for: not applied, so
   * the batcher ends the life it began, as for a START refused before it ran (a retry
   * would otherwise be refused as a START on a live id).
   */
  startNotKept: PendingRequest | undefined;
  /**
   * Withdrawn before it began: a START still waiting for its slot undone (the batcher's
   * #withdraw), or a sequence opened without a request whose first was refused
   * (SequenceAdmin.withdraw). It ends as if it had never been, counting no end, telling
   * model code nothing and leaving no recent end.
   */
  withdrawn = false;
  /** The answers of its last steps that carried `sequence_step`. */
  answers: StepAnswers | undefined;
  /** Its place in the model's sequence tier, when it has one. */
  tier: TierPlace | undefined;
  /**
   * The caller that started it (an API key's name), the only one that may continue, restart
   * or end it; undefined when its API needs no key. Kept with the sequence wherever it goes.
   */
  readonly owner: string | undefined;

  constructor(id: SequenceId, createdMs = Date.now(), owner?: string) {
    this.id = id;
    this.createdMs = createdMs;
    this.owner = owner;
  }

  /** Has a request that could run now. */
  get ready(): boolean {
    return !this.running && this.queue.length > 0 && this.holder !== undefined && this.tier?.loading !== true;
  }

  /** Nothing left to run: an ending sequence can be finished. */
  get idle(): boolean {
    return !this.running && this.queue.length === 0;
  }
}
