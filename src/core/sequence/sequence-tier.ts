import type { SequenceId } from "../infer.ts";

// A tier that keeps every sequence's state outside the process, shared by the replicas of
// a server (Redis, in src/state-tiers). With one, the in-memory store is a cache: each
// step's new state is written through before its answer is sent, a replica that gets a
// request for a sequence it does not hold reads it from the tier, and a replica that dies
// loses nothing that was answered.
//
// The tier keeps one record per sequence id of a model version: the core's encoded body
// (state, steps applied, recorded answers; see sequence-record.ts) under a version that
// every write increments, and the token of the sequence's life (a START begins a new
// life). Writes are fenced: a step is written only if the version and life it read are
// still current, atomically, so two replicas can never both advance one sequence; the
// loser learns the current record in the same answer.

/**
 * A request the tier was sent and did not answer (it timed out, or its connection closed
 * under it): what it was to do may have been done, or may be done yet when the tier
 * answers again (a write queued behind a frozen store lands when the store thaws). Unlike
 * a refusal (a full store), which changed nothing.
 */
export class TierAnswerLost extends Error {}

/** One sequence's record as the tier holds it. */
export interface TierRecord {
  /** Incremented by every write of the id; the fencing token. */
  readonly version: number;
  /** The life the record belongs to (a new START writes a new one). */
  readonly life: string;
  /** The core's encoded body (sequence-record.ts). */
  readonly body: Uint8Array;
  /** Why the sequence ended, for a record kept after its end (a tombstone); undefined while live. */
  readonly ended: string | undefined;
  /** When the record was written (epoch ms). */
  readonly writtenAtMs: number;
  /**
   * For a record ended by a reload that moved its sequence to another version of the model
   * (ModelTier.moveFrom): that version, where the sequence goes on.
   */
  readonly movedTo?: string | undefined;
}

/** What a record is, without its body. */
export type TierStamp = Pick<TierRecord, "version" | "life" | "ended">;

/**
 * - `next`: the sequence's next state, only if the record is still at `expect`;
 * - `new`: a new life of the id, whatever the tier held (a START);
 * - `new_exclusive`: a new life, only if the id has no live record (OpenVINO Model Server's START);
 * - `new_end`: a new life that ends at once (a START that is also the END), whatever the tier held;
 * - `create`, `create_end`: the first write of a life whose START wrote nothing (it failed in
 *   its model): as `new` and `new_end`, but only if the id has no live record, since a
 *   life begun on another replica meanwhile supersedes it (its writer takes that record);
 * - `end`: the life ends (the record is kept as a tombstone with `endReason`), only if still at `expect`;
 * - `force_end`: whatever live life the id has ends (an operator's DELETE).
 */
export type TierWriteMode =
  | "next"
  | "new"
  | "new_exclusive"
  | "new_end"
  | "create"
  | "create_end"
  | "end"
  | "force_end";

/** How long a live record lives without being written again. */
export type TierExpiry =
  | { readonly kind: "idle"; readonly ms: number }
  | { readonly kind: "at"; readonly epochMs: number }
  | { readonly kind: "never" };

export interface TierWrite {
  readonly id: SequenceId;
  readonly mode: TierWriteMode;
  /** For `next` and `end`: the version and life the writer read. */
  readonly expect?: { readonly version: number; readonly life: string };
  readonly life: string;
  readonly body: Uint8Array;
  /** For `end` and `force_end`. */
  readonly endReason?: string;
  readonly expiry: TierExpiry;
}

export type TierWriteResult =
  | { readonly kind: "written"; readonly version: number }
  /** The record was not what the writer expected: here is what it is (undefined: none). */
  | { readonly kind: "conflict"; readonly current: TierRecord | undefined };

/**
 * A live record taken from another version's records into these (ModelTier.moveFrom): the
 * record `from` holds at `expect` goes on here with `body`, and `from`'s is ended with
 * `endReason` and `fencedBody` (the body without its state), saying where it went.
 */
export interface TierMove {
  readonly id: SequenceId;
  readonly expect: { readonly version: number; readonly life: string };
  readonly body: Uint8Array;
  readonly fencedBody: Uint8Array;
  readonly endReason: string;
  readonly expiry: TierExpiry;
}

export type TierMoveResult =
  | { readonly kind: "moved"; readonly version: number }
  /** `from`'s record was not at `expect`: here is what it is (undefined: none). */
  | { readonly kind: "changed"; readonly current: TierRecord | undefined }
  /** These records already hold a live record of the id (another life): nothing moved. */
  | { readonly kind: "occupied"; readonly current: TierRecord };

/** A live record of a sequence id in another version's records of the model (ModelTier.findElsewhere). */
export interface TierRecordElsewhere {
  /** The version whose records hold it. */
  readonly version: string;
  /** That version's records (to move the record from: ModelTier.moveFrom). */
  readonly records: ModelTier;
  /** The state signature the replicas serving that version registered (undefined: none did). */
  readonly stateSignature: string | undefined;
  readonly record: TierRecord;
}

/** One model version's records. */
export interface ModelTier {
  /** The tier the records are in. */
  readonly tier: SequenceTier;
  /** Which records these are (the model and version they are keyed by): equal for two loads of one version. */
  readonly records: string;
  /** The model version the records are keyed by. */
  readonly version: string;
  read(id: SequenceId): Promise<TierRecord | undefined>;
  /**
   * The live records of `id` in the model's other versions' records, of the versions any
   * replica sharing the tier has served and this replica does not serve now (a rolling
   * upgrade: the sequence began on a replica serving a version that is gone from here),
   * newest write first. A version served here is another model, as each version is in
   * Triton, with its own scheduler: its sequences are never taken over by this one.
   */
  findElsewhere(id: SequenceId): Promise<readonly TierRecordElsewhere[]>;
  /**
   * The load these records were opened for (with a state signature) is built and serves:
   * the version is registered with the tier, and counted as served here. A load that fails
   * before it serves registers nothing. Once only.
   */
  startServing(): void;
  /**
   * This replica no longer serves these records' version through this load (it is
   * unloaded, or replaced by a reload): once no load of it is served here, another
   * version's sequences may be taken over from it (findElsewhere). Idempotent.
   */
  stopServing(): void;
  /**
   * The record's version, life and end, without its body (where a replica only checks
   * whether its copy is current); undefined when there is none.
   */
  stamp(id: SequenceId): Promise<TierStamp | undefined>;
  /** Applies the writes in order, in one round trip where the tier can; one result each. */
  write(writes: readonly TierWrite[]): Promise<TierWriteResult[]>;
  /**
   * Moves a sequence's live record from another version's records of the same tier into
   * these, fencing the old one (a reload moved the sequence to this version): atomically
   * where the tier can, so that no replica can advance the old record once the new one
   * is written.
   */
  moveFrom(from: ModelTier, move: TierMove): Promise<TierMoveResult>;
  /**
   * Starts the live record's expiry again, as a write would, without writing it, if the
   * record is still at `expect`; resolves with whether it was.
   */
  renew(
    id: SequenceId,
    expect: { readonly version: number; readonly life: string },
    expiry: TierExpiry,
  ): Promise<boolean>;
}

export interface SequenceTier {
  /** Where the tier is, for messages and logs (no credentials). */
  readonly location: string;
  /**
   * A model version's records. `stateSignature` (its sequences' state tensors: see
   * sequence-transfer.ts) is given by a load of the version that this replica serves
   * (from ModelTier.startServing until ModelTier.stopServing): it is registered with the tier, as one of the versions
   * of the model served, so that a replica serving another version can find this one's
   * records (ModelTier.findElsewhere) and tell whether it can take them over.
   */
  forModel(model: string, version: string, stateSignature?: string): ModelTier;
  /**
   * Reserves `count` consecutive numbers, from 0 up to below 2^63, that no replica sharing
   * the tier is ever given again, even after the tier lost its data; resolves with the
   * first (server-assigned sequence ids).
   */
  reserveIds(count: number): Promise<bigint>;
  /**
   * When the tier was last found to have lost its data (restarted without persistence),
   * or undefined. Listeners run when it is found.
   */
  readonly dataLostAtMs: number | undefined;
  onDataLost(listener: (atMs: number) => void): () => void;
  /** Resolves when every write issued so far has been answered, or at `deadlineMs` (epoch ms) if given. */
  flush(deadlineMs?: number): Promise<void>;
  /**
   * Waits for the writes issued so far, no later than `deadlineMs` (epoch ms; none when
   * not given), and lets the tier go; resolves by the deadline whatever the tier does.
   */
  close(deadlineMs?: number): Promise<void>;
}
