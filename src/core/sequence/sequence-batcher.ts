import { randomUUID } from "node:crypto";
import { asServerError, cancelled, invalidArg, ServerError, stopping, unavailable } from "../errors.ts";
import { isRequestExecutor, type ModelExecutor } from "../executor.ts";
import type { SequenceId } from "../infer.ts";
import {
  SEQUENCE_END_REASONS,
  type SequenceAdmin,
  type SequenceCaller,
  type SequenceEndReason,
  type SequenceInfo,
  type SequenceLookup,
  type SequenceOpenOptions,
  type SequenceSummary,
} from "../model.ts";
import { type ModelConfig, type SequenceBatchingConfig, usableSequenceSlots } from "../model-config.ts";
import type { Refusals } from "../refusals.ts";
import { relabelled } from "../request-label.ts";
import { validateRequest } from "../request-validation.ts";
import type { BatchObserver } from "../scheduler/batch-observer.ts";
import { OrderedRelease, takePlace } from "../scheduler/ordered-release.ts";
import type { PendingRequest, RequestResult } from "../scheduler/pending-request.ts";
import { Deque } from "../scheduler/request-queue.ts";
import type { DrainReason, Scheduler } from "../scheduler/scheduler.ts";
import { STOPPED_ACCEPTING } from "../scheduler/stopped-accepting.ts";
import type { ModelStatistics } from "../statistics.ts";
import { cloneTensor, type NumericTensor } from "../tensor.ts";
import { timerDelay } from "../timer-delay.ts";
import { checkCorrelationIdType, takesStringIds } from "./control-tensors.ts";
import { CopyChecks } from "./copy-checks.ts";
import { DirectInstance } from "./direct-instance.ts";
import { EndedAnswersMemory } from "./ended-answers.ts";
import { IdReservation } from "./id-reservation.ts";
import { initialStateTensor } from "./initial-state.ts";
import { keepsSequenceOnCancel } from "./keeps-sequence-on-cancel.ts";
import { OldestInstance } from "./oldest-instance.ts";
import { sequenceKey as idKey, type RecentEnd, RecentEnds } from "./recent-ends.ts";
import { Sequence, type TierPlace } from "./sequence.ts";
import { answerStep, type SequenceModel, type StepDone } from "./sequence-batch-execution.ts";
import type { SequenceInstance, SequenceOwner } from "./sequence-instance.ts";
import { formatSequenceId } from "./sequence-parameters.ts";
import { decodeRecordBody, encodeRecordBody, type SequenceRecordBody } from "./sequence-record.ts";
import {
  type ModelTier,
  TierAnswerLost,
  type TierExpiry,
  type TierRecord,
  type TierWrite,
  type TierWriteMode,
  type TierWriteResult,
} from "./sequence-tier.ts";
import {
  type HandoverResult,
  type SequenceTransfer,
  stateSignature,
  type TransferredSequence,
} from "./sequence-transfer.ts";
import { SlabStateStore, stateRowBytes } from "./slab-state-store.ts";
import type { StateBudget } from "./state-budget.ts";
import { isSerializedValue, type SequenceState, type StateEntry, type StateStore } from "./state-store.ts";
import { fixedStateLayouts, stateStoreForModel } from "./state-store-for-model.ts";
import { checkStep, type StepAnswer, StepAnswers, stepAnswer } from "./step-answers.ts";

// The scheduler of stateful models (Triton's sequence batcher). It admits requests with
// Triton's checks and messages, in Triton's order; gives each new sequence a slot on an
// instance, or a place in a bounded FIFO backlog when every slot is taken; keeps each
// sequence's requests in arrival order on the instance that holds it; and ends sequences
// on END, idle timeout, restart, cancellation, a forced end, expiry, unload, reload or
// shutdown — always through #finish, the one place that frees state and slots and counts
// the end by reason. A sequence may also be opened without a request and closed without
// one (sessions), and may carry an absolute expiry.

export interface SequenceBatcherOptions {
  readonly config: ModelConfig;
  readonly executors: readonly ModelExecutor[];
  readonly statistics: ModelStatistics;
  /** Where state is kept; by default the store the model's states call for (see state-store-for-model.ts). */
  readonly store?: StateStore;
  /** Logs sequence ends that clients may wonder about (restarts, evictions). */
  readonly warn?: (message: string) => void;
  /**
   * Logs routine ends: idle timeouts (a streaming client that leaves without an END is
   * common; Triton and OVMS log their reapers at their verbose and debug levels).
   */
  readonly info?: (message: string) => void;
  /** Told about every batch (the model runner's log). */
  readonly observer?: BatchObserver;
  /**
   * A tier shared with other replicas (sequence-tier.ts): each step's state is written
   * through to it before the step is answered, and sequences this replica does not hold
   * are read from it. The in-memory store is then a cache.
   */
  readonly tier?: ModelTier;
  /** Longest string id, in UTF-8 bytes (a sequence keeps its id for its whole life). */
  readonly maxIdBytes?: number;
  /** Where refusals by a limit are counted. */
  readonly refusals?: Refusals;
  /** The server's budget of state bytes, shared by every model (--max-state-bytes). */
  readonly stateBudget?: StateBudget;
  /** FIRST_REQUEST_WINDOW_MS, for tests. */
  readonly firstRequestWindowMs?: number;
}

/** The least time between two looks at the tier for copies that moved on (#reclaimStaleCopies). */
const RECLAIM_INTERVAL_MS = 1000;

/** The least time between two looks at the tier for quiet copies (#checkCopies). */
const COPY_CHECK_INTERVAL_MS = 1000;

/**
 * How long a live record outlives its idle timeout in the tier. A replica's copy that is
 * behind reaches its idle timeout no later than the current copy, but asks the tier up to
 * a look's interval later: the record must still be there (or the current copy's end
 * written in its place), or the copy would take the missing record for its own and time
 * out too, its model code told a second, false end with old state.
 */
const IDLE_RECORD_GRACE_MS = 5 * COPY_CHECK_INTERVAL_MS;

/**
 * A session's copy quiet here this long (or for the model's idle timeout, if shorter) is
 * asked about (#armSessionCheck): far less than a session's expiry (20 minutes for
 * SageMaker's), so a session that went on, or was closed, on another replica leaves this
 * one soon after; the same time between looks while it stays the current copy.
 */
const SESSION_QUIET_MS = 60_000;

/**
 * How long a sequence opened without a request (a SageMaker session) keeps its slot
 * waiting for its first request, unless the model's idle timeout is longer: a minute,
 * SageMaker's time for an invocation, where Triton's default idle timeout is 1 s.
 */
const FIRST_REQUEST_WINDOW_MS = 60_000;

/** How often a step runs again after another replica advanced its sequence at the same time. */
const MAX_STEP_RETRIES = 3;

/** Ends that a replica records in the tier; the others only let go of its copy (or the tier has no record). */
const UNRECORDED_ENDS: ReadonlySet<SequenceEndReason> = new Set([
  "shutdown",
  "unloaded",
  "reloaded",
  "state_lost",
]);

/** The request was sent with OVMS's admission ("exclusive"). */
const isExclusive = (pending: PendingRequest): boolean => pending.request.sequence?.admission === "exclusive";

/** The request ends its sequence. */
const isEndRequest = (pending: PendingRequest): boolean => pending.request.sequence?.end === true;

/**
 * Where a server-assigned id starts. OVMS counts from 1, skipping live ids, and its
 * clients (the exclusive admission) get the same. Other clients get ids from 2^52: away
 * from the ids clients usually pick, yet exact in a double, so that a client reading JSON
 * with JSON.parse or jq, or gRPC's uint64 as a JavaScript number, can send it back. Ids
 * reserved from a tier shared by replicas are 2^62 plus its counter (a clock-seeded
 * count: see redis-sequence-tier.ts), and need a client that reads a uint64 exactly.
 */
const FIRST_EXCLUSIVE_ID = 1n;
const FIRST_ASSIGNED_ID = 1n << 52n;
const FIRST_TIER_ID = 1n << 62n;

/**
 * How a step's state is written to the tier: `fresh`, the tier holds nothing of its life
 * yet; `starts`, a START (which begins its life whatever the tier holds); `exclusive`,
 * OVMS's START (only on an id without a live record).
 */
function writeMode(step: {
  end: boolean;
  fresh: boolean;
  starts: boolean;
  exclusive: boolean;
}): TierWriteMode {
  if (!step.fresh) return step.end ? "end" : "next";
  if (step.end) return step.starts ? "new_end" : "create_end";
  if (step.exclusive) return "new_exclusive";
  return step.starts ? "new" : "create";
}

function copyState(state: SequenceState | undefined): SequenceState | undefined {
  if (state === undefined) return undefined;
  const copy = new Map<string, StateEntry>();
  for (const [name, entry] of state) {
    copy.set(name, isSerializedValue(entry) ? { serialized: entry.serialized.slice() } : cloneTensor(entry));
  }
  return copy;
}

function clearTimer(timers: Map<Sequence, NodeJS.Timeout>, sequence: Sequence): void {
  const timer = timers.get(sequence);
  if (timer === undefined) return;
  clearTimeout(timer);
  timers.delete(sequence);
}

/** The most requests of one model that wait for the state store at once. */
const MAX_WAITING_FOR_TIER = 4096;

export class SequenceBatcher implements Scheduler, SequenceAdmin, SequenceOwner {
  readonly #config: ModelConfig;
  readonly #sequencing: SequenceBatchingConfig;
  /** A look at the tier for copies that moved on is under way (#reclaimStaleCopies). */
  #reclaiming = false;
  /** When the last look began (epoch ms), and the timer of the next one. */
  #lastReclaimMs = 0;
  #reclaimTimer: NodeJS.Timeout | undefined;
  /** Told when the next look is over: new sequences that found no room (#admitAfterLook). */
  #lookWaiters: (() => void)[] = [];
  readonly #model: SequenceModel;
  readonly #instances: SequenceInstance[];
  readonly #warn: (message: string) => void;
  readonly #info: (message: string) => void;
  /** Ids in use, each owned by the live sequence that answers to it. */
  readonly #live = new Map<string, Sequence>();
  /** Every sequence not yet finished (live, backlogged, or ending after its id was released). */
  readonly #all = new Set<Sequence>();
  readonly #backlog = new Deque<Sequence>();
  readonly #backlogTimers = new Map<Sequence, NodeJS.Timeout>();
  readonly #expiryTimers = new Map<Sequence, NodeJS.Timeout>();
  /** Copies of sequences asked about before they end idle, or while a session's sits quiet (#checkCopies). */
  readonly #copyChecks = new CopyChecks<Sequence>(
    (copies) => this.#checkCopies(copies),
    COPY_CHECK_INTERVAL_MS,
  );
  /** Sessions' copies, until they are quiet enough to be asked about (#armSessionCheck). */
  readonly #sessionCheckTimers = new Map<Sequence, NodeJS.Timeout>();
  /** Sequences opened without a request, until their first (#armFirstRequest). */
  readonly #firstRequestTimers = new Map<Sequence, NodeJS.Timeout>();
  readonly #firstRequestWindow: number;
  /** Why ids that are no longer live ended, for lookup(). */
  readonly #recentEnds = new RecentEnds();
  /** Without a tier: the answers of sequences ended by their END, for their retries (#answerFromEndedHere). */
  readonly #endedAnswers = new EndedAnswersMemory();
  /** Live sequences by last arrival, oldest first (re-inserted on each arrival). */
  readonly #byArrival = new Map<Sequence, true>();
  readonly #idleMs: number | undefined;
  /** sequence_idle_from: last_step (OVMS's cleaner). */
  readonly #idleFromLastStep: boolean;
  #idleTimer: NodeJS.Timeout | undefined;
  readonly #ended: Record<SequenceEndReason, number>;
  /** preserve_ordering: the order answers leave in, shared with the instances. */
  readonly #ordering: OrderedRelease | undefined;
  /** Ids whose END was accepted and whose sequence has not finished yet. */
  readonly #ending = new Map<string, Sequence>();
  /** Live sequences allowed at once (max_candidate_sequence_use_ratio of the slots). */
  readonly #maxLive: number;
  readonly #maxIdBytes: number;
  readonly #refusals: Refusals | undefined;
  /** Stops counting this model's state in the server's budget. */
  readonly #leaveBudget: () => void;
  #nextAssignedId = FIRST_ASSIGNED_ID;
  #nextExclusiveId = FIRST_EXCLUSIVE_ID;
  #pending = 0;
  #shuttingDown = false;
  #idleWaiters: (() => void)[] = [];
  /** Waiters for the moment no request is pending (a hand-over's drain). */
  #settleWaiters: (() => void)[] = [];
  /** The tier shared with other replicas, when the model has one. */
  readonly #tier: ModelTier | undefined;
  /** Server-assigned ids reserved from the tier (unique across its replicas). */
  readonly #ids: IdReservation | undefined;
  /** Ids whose admission waits for the tier's record, with the requests that wait. */
  readonly #looks = new Map<string, PendingRequest[]>();
  /** Requests in #looks and those waiting for ids (see #checkRoomToWait). */
  #waitingForTier = 0;
  /** Steps sent back to their sequence's queue after a write conflict, and how often. */
  readonly #retries = new WeakMap<PendingRequest, number>();
  /**
   * Requests that found no room and waited for a look at the copies held here
   * (#admitAfterLook): admitted again, they are refused if there is still none. A START
   * given an id by the server keeps it (`assignedId`).
   */
  readonly #waitedForRoom = new WeakMap<PendingRequest, { readonly assignedId: SequenceId | undefined }>();
  #stopListening: (() => void) | undefined;
  #tierLoaded = 0;
  #tierConflicts = 0;
  #handedOver = 0;
  /** Writes the tier refused or failed (SequenceTierSummary.writeFailures). */
  #tierWriteFailures = 0;

  constructor(options: SequenceBatcherOptions) {
    const { config } = options;
    this.#config = config;
    this.#sequencing = config.sequenceBatching!;
    this.#warn = options.warn ?? (() => {});
    this.#info = options.info ?? (() => {});
    this.#firstRequestWindow = options.firstRequestWindowMs ?? FIRST_REQUEST_WINDOW_MS;
    this.#maxIdBytes = options.maxIdBytes ?? Number.POSITIVE_INFINITY;
    this.#refusals = options.refusals;
    const initialStates = new Map<string, NumericTensor>();
    for (const state of this.#sequencing.states)
      initialStates.set(state.inputName, initialStateTensor(state));
    const layouts = fixedStateLayouts(config, initialStates);
    const budget = options.stateBudget;
    const perSequence = layouts === undefined ? 0 : stateRowBytes(layouts);
    if (budget !== undefined && perSequence > budget.maxBytes) {
      // No sequence could ever start: a load failure, as for sequence_state_max_bytes.
      throw invalidArg(
        `the state of model '${config.name}' takes ${perSequence} bytes per sequence, more than the server's --max-state-bytes (${budget.maxBytes}) for every model's sequences together`,
      );
    }
    const strategy = this.#sequencing.strategy;
    const perInstance =
      strategy.kind === "direct" ? Math.max(1, config.maxBatchSize) : strategy.maxCandidateSequences;
    const slots = perInstance * options.executors.length;
    this.#tier = options.tier;
    const store = options.store ?? stateStoreForModel(layouts, config, slots);
    this.#model = {
      config,
      statistics: options.statistics,
      store,
      initialStates,
      ...(store instanceof SlabStateStore ? { laidOut: (key: string) => store.laidOut(key) } : {}),
      ...(options.stateBudget === undefined ? {} : { budget: options.stateBudget }),
      ...(options.observer === undefined ? {} : { observer: options.observer }),
      ...(options.tier === undefined
        ? {}
        : { writeThrough: (steps: readonly StepDone[]) => this.#writeThrough(steps) }),
    };
    this.#leaveBudget = options.stateBudget?.count(this.#model.store) ?? (() => {});
    if (options.tier !== undefined) {
      const shared = options.tier.tier;
      this.#ids = new IdReservation((count) => shared.reserveIds(count));
      void this.#ids.ready().catch(() => {});
      this.#stopListening = shared.onDataLost((atMs) => this.#dataLost(atMs));
    }
    // preserve_ordering: answers leave in the order their requests left for the instances
    // (one order for all of them). Not in the order of admission: a request waiting in
    // the backlog would hold every later answer until its sequence got a slot.
    const ordering =
      strategy.kind === "oldest" && strategy.preserveOrdering ? new OrderedRelease() : undefined;
    this.#ordering = ordering;
    this.#instances = options.executors.map((executor) =>
      strategy.kind === "direct"
        ? new DirectInstance(this.#model, this, executor, strategy)
        : new OldestInstance(this.#model, this, executor, strategy, ordering),
    );
    const idleUs = this.#sequencing.maxSequenceIdleUs;
    this.#idleMs = idleUs === undefined ? undefined : idleUs / 1000;
    this.#idleFromLastStep = this.#sequencing.idleFrom === "last_step";
    const ratio = this.#sequencing.maxSequenceUseRatio;
    this.#maxLive = ratio === undefined ? Number.POSITIVE_INFINITY : usableSequenceSlots(ratio, slots);
    this.#ended = Object.fromEntries(SEQUENCE_END_REASONS.map((r) => [r, 0])) as Record<
      SequenceEndReason,
      number
    >;
    for (const instance of this.#instances) {
      const executor = instance.executor;
      if (isRequestExecutor(executor)) executor.onReplaced((why) => this.#instanceFailed(instance, why));
    }
  }

  get pending(): number {
    return this.#pending;
  }

  get running(): number {
    let running = 0;
    for (const instance of this.#instances) running += instance.running;
    return running;
  }

  /** Slots over all instances. */
  get capacity(): number {
    return this.#instances.reduce((n, i) => n + i.capacity, 0);
  }

  enqueue(pending: PendingRequest): void {
    this.#admit(pending, false);
  }

  /**
   * Admits `pending`; `looked`: the tier was already asked about its id (or need not be).
   * A request that found no room and was admitted again after the tier said which copies
   * held here are behind (#admitAfterLook) is `reclaimed`.
   */
  #admit(pending: PendingRequest, looked: boolean): void {
    const model = this.#config.name;
    const control = pending.request.sequence;
    const start = control?.start ?? false;
    const end = control?.end ?? false;
    const exclusive = control?.admission === "exclusive";
    const reclaimed = this.#waitedForRoom.get(pending);
    let id = control?.id;
    if (id === undefined) {
      if (!start) {
        throw new ServerError(
          "INVALID_ARG",
          `inference request to model '${model}' must specify a non-zero or non-empty correlation ID`,
          { reason: "sequence_id_missing" },
        );
      }
      if (this.#shuttingDown) {
        throw stopping(STOPPED_ACCEPTING);
      }
      // A START that waited for room keeps the id it was given first: the tier's ids are
      // never given twice, so nobody took it meanwhile, and none is spent for nothing.
      const assigned = reclaimed?.assignedId ?? this.#assignId(exclusive);
      if (assigned === undefined) {
        this.#waitForIds(pending);
        return;
      }
      id = assigned;
      pending.responseParameters.sequence_id = id;
    }
    // The id's type was checked with the request (validateRequest, in Triton's order); an
    // id the server assigned has the CORRID's type.
    this.#checkIdLength(id);
    if (this.#shuttingDown && start) {
      throw stopping(STOPPED_ACCEPTING);
    }
    const key = idKey(id);
    let existing = this.#live.get(key);
    if (existing !== undefined && this.#pastExpiry(existing)) {
      // Its timer has not fired yet: the expiry holds all the same.
      this.#expire(existing);
      if (!start) throw invalidArg(this.#expiredMessage(existing));
      existing = undefined;
    }
    if (
      this.#tier !== undefined &&
      !looked &&
      (existing === undefined ||
        (start &&
          (exclusive ||
            (pending.request.principal !== undefined && existing.tier?.version !== undefined)))) &&
      control?.id !== undefined &&
      !this.#ending.has(key) &&
      (!start || exclusive || control.step !== undefined || pending.request.principal !== undefined)
    ) {
      // Another replica may hold it, or have moved on from the copy held here: the tier
      // says (for a START with an API key, whether another key's sequence holds the id;
      // for an exclusive START, whether the id is live).
      if (this.#shuttingDown) throw this.#leavingError(id);
      this.#lookUp(key, id, pending);
      return;
    }
    // A numbered retry of a START that was applied continues the sequence it began (and
    // is answered from the recorded answer) instead of starting it again.
    const starts = start && !(control?.step !== undefined && existing !== undefined && existing.applied > 0);
    if (!starts && existing === undefined) {
      if (this.#answerFromEndedHere(pending, key)) return;
      // Lost with the tier's data, or with a model instance that failed: say so rather
      // than ask for a START as if its client had ended it.
      const recent = this.#recentEnds.get(key);
      const ended = recent?.reason;
      if (this.#tier !== undefined && recent?.movedTo !== undefined)
        throw this.#movedError(id, recent.movedTo);
      if (this.#tier !== undefined && ended === "state_lost") throw this.#lostError(id);
      // Ended by the stop's deadline: the client is told to go elsewhere, not to START.
      if (ended === "shutdown") {
        throw stopping(`the server is shutting down: ${this.#describe(id)} has ended with it`);
      }
      throw this.#unknownId(id, exclusive, ended === "instance_failed" ? ended : undefined);
    }
    const principal = pending.request.principal;
    if (existing !== undefined) this.#checkOwner(existing, principal);
    // A full model refuses a START before anything else, as OVMS's sequence manager does
    // (even one naming a live id); a Triton-style START on a live id restarts it in place.
    if (starts && (exclusive || existing === undefined)) {
      const refusal = this.#noRoomForNew();
      if (refusal !== undefined) {
        if (this.#tier === undefined || reclaimed !== undefined) throw refusal;
        this.#admitAfterLook(pending, refusal, true, control?.id === undefined ? id : undefined);
        return;
      }
    }
    if (starts && exclusive) this.#checkExclusiveStart(id, existing);

    let sequence: Sequence;
    if (starts) {
      sequence = new Sequence(id, Date.now(), principal);
      sequence.tier = this.#newPlace();
      if (existing !== undefined) {
        // A session's restart (a START on its id over another API) keeps its expiry: the
        // idle timeout does not apply to a session, and must not begin to.
        sequence.expiresAtMs = existing.expiresAtMs;
        // The successor must be known (in #all) before #restart: when the old life is
        // idle, #restart finishes it at once, and #finish only hands the slot to (or
        // places) a successor it knows; otherwise the new life never got a slot and its
        // requests waited forever.
        this.#all.add(sequence);
        this.#restart(existing, sequence);
      } else {
        this.#place(sequence);
        if (sequence.status === "backlogged") this.#holdWaitingStart(sequence, pending);
        this.#all.add(sequence);
      }
      this.#live.set(key, sequence);
      this.#recentEnds.forget(key);
      if (sequence.expiresAtMs !== undefined) this.#armExpiry(sequence, sequence.expiresAtMs);
    } else {
      sequence = existing!;
      if (sequence.status === "backlogged") this.#holdBehindStart(sequence, pending);
    }

    const endIfStartFails = control?.id === undefined || (starts && control.endIfStartFails === true);
    this.#accept(sequence, pending, endIfStartFails);
    if (starts) control?.onStarted?.();
    sequence.lastArrivalMs = Date.now();
    this.#clearFirstRequest(sequence);
    if (end) {
      sequence.endReason = "end";
      this.#releaseId(sequence);
      this.#ending.set(key, sequence);
    } else if (sequence.holder !== undefined && sequence.expiresAtMs === undefined) {
      this.#byArrival.delete(sequence);
      this.#byArrival.set(sequence, true);
      this.#armIdleTimer();
    }
    // A request's `timeout` bounds how long its sequence waits in the backlog for a slot,
    // the earliest deadline winning (Triton's). A restart's new life waits for the slot
    // its old life holds: it is not in the backlog, and no timeout (of the START or a
    // later request) can cost it its id.
    const waitsForSlot = sequence.holder === undefined && !sequence.takesOverSlot;
    if (waitsForSlot && control?.timeoutUs !== undefined)
      this.#armBacklogTimeout(sequence, control.timeoutUs);
    sequence.holder?.wake(sequence);
  }

  /**
   * Takes `pending` into `sequence`'s queue: counted and cancellable. `endIfStartFails`:
   * the request is a START that nobody would continue if it failed.
   */
  #accept(sequence: Sequence, pending: PendingRequest, endIfStartFails: boolean): void {
    this.#pending++;
    pending.promise.then(
      () => this.#settled(),
      () => {
        this.#settled();
        // A failed START with a server-assigned id was the only place the id would have
        // been told to the client, and a client may say it starts again rather than go
        // on: nobody would continue or end the sequence, so it ends now.
        if (endIfStartFails && this.#all.has(sequence)) {
          this.#endNow(
            sequence,
            "forced",
            cancelled(`sequence ${formatSequenceId(sequence.id)} ended: its START request failed`),
          );
        } else if (this.#all.has(sequence)) this.#renew(sequence);
      },
    );
    sequence.queue.push(pending);
    pending.onCancel((p) => this.#cancelled(sequence, p));
  }

  // ---- admission helpers ----

  /**
   * A sequence keeps its id for its whole life (and the id is remembered a while after):
   * an id without bound would pin any amount of memory.
   */
  #checkIdLength(id: SequenceId): void {
    if (typeof id !== "string" || id.length * 3 <= this.#maxIdBytes) return;
    const bytes = Buffer.byteLength(id, "utf8");
    if (bytes <= this.#maxIdBytes) return;
    this.#refusals?.refused("sequence_id_bytes");
    throw invalidArg(
      `the sequence id of model '${this.#config.name}' is ${bytes} bytes long, more than the ${this.#maxIdBytes} bytes allowed (--max-sequence-id-bytes)`,
    );
  }

  /** Only the caller that started a sequence may continue, restart or end it. */
  #checkOwner(sequence: Sequence, principal: string | undefined): void {
    if (sequence.owner !== principal) throw this.#ownerError(sequence.id);
  }

  #startAgain(id: SequenceId): ServerError {
    return unavailable(
      `${this.#describe(id)} ended on another replica while this one held an older copy of it; send the START again to begin it anew`,
      1,
    );
  }

  #ownerError(id: SequenceId): ServerError {
    return new ServerError(
      "PERMISSION_DENIED",
      `sequence ${formatSequenceId(id)} of model '${this.#config.name}' belongs to another caller: only the API key that started it may continue or end it`,
    );
  }

  /**
   * Why a new sequence is refused at once, if it is: past max_candidate_sequence_use_ratio's
   * share of the slots, or when every slot is taken and the backlog is full.
   */
  #noRoomForNew(): ServerError | undefined {
    if (this.#live.size < this.#maxLive) {
      if (this.#backlog.length < this.#sequencing.backlogLimit) return undefined;
      if (this.#instances.some((instance) => instance.free > 0)) return undefined;
      return this.#slotsFullError();
    }
    return new ServerError(
      "UNAVAILABLE",
      `model '${this.#config.name}' has ${this.#live.size} live sequences, as many as max_candidate_sequence_use_ratio ` +
        `${this.#sequencing.maxSequenceUseRatio} of its ${this.capacity} sequence slots allows; retry later`,
      { retryAfterSeconds: 1, reason: "sequence_limit" },
    );
  }

  /**
   * A server-assigned id, or undefined while the tier has not reserved more: a number, or
   * its decimal text for a model whose CORRID carries strings.
   */
  #assignId(exclusive: boolean): SequenceId | undefined {
    for (;;) {
      let number: bigint;
      if (this.#ids !== undefined) {
        const taken = this.#ids.take();
        if (taken === undefined) return undefined;
        number = FIRST_TIER_ID + taken;
      } else if (exclusive) {
        // OVMS's counter (SequenceManager::getUniqueSequenceId) stays on the id it gave and
        // moves on only past ids in use: an ended sequence's id is given again, and a START
        // refused (no room) uses none.
        number = this.#nextExclusiveId;
      } else number = this.#nextAssignedId++;
      const id = takesStringIds(this.#config) ? String(number) : number;
      const key = idKey(id);
      if (!this.#live.has(key) && !this.#ending.has(key)) return id;
      if (exclusive && this.#ids === undefined) this.#nextExclusiveId++;
    }
  }

  /**
   * A request without START for an id no live sequence answers to; `endedBy`: the reason
   * it recently ended, when the server ended it (its model instance failed).
   */
  /** `said`: why it ended, in words, where more is known than its reason. */
  #unknownId(id: SequenceId, exclusive: boolean, endedBy?: SequenceEndReason, said?: string): ServerError {
    const sequence = `sequence ${formatSequenceId(id)}`;
    const why = said ?? (endedBy === undefined ? undefined : `it has ended (reason '${endedBy}')`);
    if (exclusive) {
      return new ServerError(
        "NOT_FOUND",
        `${sequence} of model '${this.#config.name}' does not exist: ${why ?? "it never started, or it has ended"}`,
        { reason: "sequence_unknown" },
      );
    }
    return new ServerError(
      "INVALID_ARG",
      `inference request for ${sequence} to model '${this.#config.name}' must specify the START flag on the first request of the sequence${why === undefined ? "" : `: ${why}`}`,
      { reason: "sequence_unknown" },
    );
  }

  /** Exclusive admission: a START may not take an id that a sequence still holds. */
  #checkExclusiveStart(id: SequenceId, live: Sequence | undefined): void {
    const sequence = `sequence ${formatSequenceId(id)} of model '${this.#config.name}'`;
    if (live !== undefined) {
      throw new ServerError("ALREADY_EXISTS", `${sequence} already exists: end it before starting it again`, {
        reason: "sequence_exists",
      });
    }
    if (this.#ending.has(idKey(id))) {
      throw new ServerError(
        "FAILED_PRECONDITION",
        `${sequence} is ending: its END request has not finished yet, so the id cannot start a new sequence`,
        { reason: "sequence_ending" },
      );
    }
  }

  #slotsFullError(): ServerError {
    return new ServerError(
      "UNAVAILABLE",
      `model '${this.#config.name}' has all ${this.capacity} sequence slots in use and its backlog of ${this.#sequencing.backlogLimit} sequences is full; retry later`,
      { retryAfterSeconds: 1, reason: "sequence_limit" },
    );
  }

  /**
   * A START that waits in the backlog holds its bytes in the server's budget of waiting
   * STARTs (queue-budget.ts); refused for want of room there, it leaves the backlog.
   */
  #holdWaitingStart(sequence: Sequence, pending: PendingRequest): void {
    try {
      pending.holdWhileWaiting();
    } catch (error) {
      this.#backlog.remove((s) => s === sequence);
      throw error;
    }
  }

  /**
   * A step behind a START that waits in the backlog waits as long, for the same slot: its
   * bytes count with the START's (queue-budget.ts). Refused for want of room there, it
   * withdraws the sequence, which has not begun (#withdraw): going on without the step
   * would apply the client's later steps without it, where Triton, whose backlog has no
   * bound, refuses none of them.
   */
  #holdBehindStart(sequence: Sequence, pending: PendingRequest): void {
    const withdraws = this.#waitsToStart(sequence);
    try {
      pending.holdWhileWaiting(formatSequenceId(sequence.id), withdraws);
    } catch (error) {
      if (withdraws) this.#withdraw(sequence, asServerError(error));
      throw error;
    }
  }

  /**
   * Whether `sequence` is a life that has not begun: its START, queued, waits for a slot
   * (in the backlog, or for the slot of the life it restarts), and nothing of it has run.
   * A sequence taken up from the tier or moved from another version, or a session opened
   * without a START, has begun, though it may wait in the backlog.
   */
  #waitsToStart(sequence: Sequence): boolean {
    return (
      sequence.holder === undefined &&
      sequence.steps === 0 &&
      !sequence.running &&
      sequence.queue.peek()?.request.sequence?.start === true
    );
  }

  /** A sequence can be placed (#place): a slot is free, or the backlog has room. */
  get #roomToPlace(): boolean {
    return (
      this.#backlog.length < this.#sequencing.backlogLimit ||
      this.#instances.some((instance) => instance.free > 0)
    );
  }

  /** A new sequence takes a free slot on the least-loaded instance, or joins the backlog. */
  #place(sequence: Sequence): void {
    let best: SequenceInstance | undefined;
    for (const instance of this.#instances)
      if (instance.free > 0 && (best === undefined || instance.free > best.free)) best = instance;
    if (best !== undefined) {
      best.bind(sequence);
      this.#slotTaken(sequence);
      sequence.status = "active";
      return;
    }
    if (this.#backlog.length >= this.#sequencing.backlogLimit) throw this.#slotsFullError();
    sequence.status = "backlogged";
    this.#backlog.push(sequence);
    if (this.#tier !== undefined) this.#reclaimStaleCopies();
  }

  /**
   * A new sequence that finds no room, with a tier: the slots (and the live count that
   * max_candidate_sequence_use_ratio bounds) may be taken by copies of sequences that moved
   * on (#lookForStaleCopies), which on one server would have ended or never been here. It
   * waits for the tier to say which, and is admitted again once they are let go: refused,
   * as on one server, only if there is still no room. A sequence begun on another replica
   * whose step finds no room here to take it up waits the same way (#looked). `refusal`:
   * what it is told when it cannot wait (as many requests wait for the tier as it
   * allows); `looked`: admitted again without reading its record again (a START);
   * `assignedId`: the id the server gave a START without one.
   */
  #admitAfterLook(
    pending: PendingRequest,
    refusal: ServerError,
    looked: boolean,
    assignedId?: SequenceId,
  ): void {
    if (!this.#roomToWaitForTier) throw refusal;
    this.#waitedForRoom.set(pending, { assignedId });
    this.#waitingForTier++;
    this.#pending++;
    this.#reclaimStaleCopies(() => this.#readmit(pending, looked));
  }

  /** `pending`, back from waiting for the tier (counted in #pending and #waitingForTier), is admitted again. */
  #readmit(pending: PendingRequest, looked: boolean): void {
    this.#pending--;
    this.#waitingForTier--;
    try {
      this.#admit(pending, looked);
    } catch (error) {
      pending.reject(asServerError(error));
    }
    this.#notifyIdle();
  }

  /**
   * With a tier, a slot may hold a copy of a sequence that has moved on: its requests went
   * to another replica (a balancer without stickiness, a failover), which advanced it, ended
   * it or began it again. Such a copy is let go when a sequence needs its slot (rather than
   * at its idle timeout, or never with `never`): one waits in the backlog, or a new one
   * finds no room (`then` runs when the look that begins next is over).
   */
  #reclaimStaleCopies(then?: () => void): void {
    if (then !== undefined) this.#lookWaiters.push(then);
    // A look under way tells its waiters; those that came since wait for the next one,
    // which begins when it ends: copies may have moved on after it read them.
    if (this.#reclaiming || this.#reclaimTimer !== undefined) return;
    // At most one look a second: under a full model every new sequence backlogs (or waits
    // here), and each look asks the tier about every copy held.
    const waitMs = this.#lastReclaimMs + RECLAIM_INTERVAL_MS - Date.now();
    if (waitMs > 0) {
      this.#reclaimTimer = setTimeout(() => {
        this.#reclaimTimer = undefined;
        if (this.#backlog.length > 0 || this.#lookWaiters.length > 0) this.#reclaimStaleCopies();
      }, waitMs);
      this.#reclaimTimer.unref();
      return;
    }
    void this.#lookForStaleCopies();
  }

  /**
   * Asks the tier about every idle copy held here and lets go of those that are behind.
   * Let go, a copy is not an end (neither counted nor told): the sequence is elsewhere.
   */
  async #lookForStaleCopies(): Promise<void> {
    const waiters = this.#lookWaiters;
    this.#lookWaiters = [];
    this.#lastReclaimMs = Date.now();
    this.#reclaiming = true;
    try {
      const held = [...this.#all].filter(
        (s) =>
          s.holder !== undefined &&
          s.idle &&
          s.endReason === undefined &&
          s.tier !== undefined &&
          s.tier.version !== undefined &&
          !s.tier.loading &&
          !s.tier.leaving,
      );
      // The records' stamps (version, life, end), not their bodies: nothing else is compared.
      const records = await Promise.all(
        held.map((s) =>
          this.#recordsOf(s.tier!)
            .stamp(s.id)
            .catch(() => null),
        ),
      );
      held.forEach((sequence, i) => {
        const record = records[i];
        const place = sequence.tier!;
        // Unreadable (null), without a record (its expiry, a store that lost its data: this
        // copy may be all there is), or changed here meanwhile: kept as it is.
        if (record === null || record === undefined) return;
        if (!this.#all.has(sequence) || !sequence.idle || sequence.endReason !== undefined) return;
        // A version behind this copy's is a step it wrote since the look: it is current.
        const current =
          record.ended === undefined && record.life === place.life && record.version <= (place.version ?? 0);
        if (current) return;
        place.leaving = true;
        sequence.endReason = "end";
        this.#finish(sequence);
      });
    } finally {
      this.#reclaiming = false;
      for (const waiter of waiters) waiter();
      if (this.#lookWaiters.length > 0) this.#reclaimStaleCopies();
    }
  }

  /**
   * A START on a live id: the old sequence ends (reason "restart") once its queued
   * requests have run, and the new one takes over its slot with fresh state.
   */
  #restart(old: Sequence, successor: Sequence): void {
    this.#warn(
      `sequence ${formatSequenceId(old.id)} of model '${this.#config.name}' was restarted by a new START; its earlier state is dropped`,
    );
    old.endReason = "restart";
    this.#releaseId(old);
    old.successor = successor;
    successor.status = "backlogged";
    successor.takesOverSlot = old.holder !== undefined || old.takesOverSlot;
    if (old.idle) this.#finish(old);
  }

  /**
   * `sequence` got a slot: the lives that restarted its id wait for that slot now, not in
   * the backlog, so their backlog timeouts end.
   */
  #slotTaken(sequence: Sequence): void {
    for (let next = sequence.successor; next !== undefined && this.#all.has(next); next = next.successor) {
      next.takesOverSlot = true;
      next.backlogDeadlineMs = undefined;
      this.#clearBacklogTimeout(next);
    }
  }

  /** The id no longer answers to `sequence`; it runs what it has queued, then finishes. */
  #releaseId(sequence: Sequence): void {
    const key = idKey(sequence.id);
    if (this.#live.get(key) === sequence) {
      this.#live.delete(key);
      if (!sequence.withdrawn)
        this.#recentEnds.remember(key, { reason: sequence.endReason ?? "end", endedAtMs: Date.now() });
    }
    this.#byArrival.delete(sequence);
    if (sequence.status !== "backlogged") sequence.status = "ending";
  }

  // ---- SequenceOwner: called by instances ----

  afterStep(sequence: Sequence): void {
    // A step that wrote nothing to the tier on a copy the tier has never held (its START
    // failed in the model, or was not written): another replica may have begun the id
    // since, so the tier is read before the copy's next step (#reload), never run on it
    // blindly, nor judged by it (a numbered step).
    const place = sequence.tier;
    if (place !== undefined && place.version === undefined && !place.ended && this.#all.has(sequence))
      place.stale = true;
    this.#goOn(sequence);
  }

  /** After a step or a read of the tier: ends a sequence that is done, or runs its next request. */
  #goOn(sequence: Sequence): void {
    const notKept = sequence.startNotKept;
    sequence.startNotKept = undefined;
    if (notKept !== undefined && this.#undoStart(sequence, notKept)) return;
    if (sequence.endReason !== undefined && sequence.idle) {
      this.#finish(sequence);
      return;
    }
    if (this.#idleFromLastStep && sequence.holder !== undefined) this.#startIdleClock(sequence);
    if (sequence.ready) sequence.holder!.wake(sequence);
  }

  settleWithoutRun(sequence: Sequence): boolean {
    let settled = false;
    for (;;) {
      const head = sequence.queue.peek();
      const place = sequence.tier;
      if (head === undefined || sequence.running || place?.loading === true) return settled;
      if (place?.stale === true) {
        this.#reload(sequence);
        return true;
      }
      const step = head.request.sequence?.step;
      if (step !== undefined && step !== sequence.applied + 1) {
        // A retry, or a step ahead of what this replica holds: with a tier, what it holds
        // may be behind another replica's, so the tier decides.
        if (place !== undefined && !place.verified) {
          this.#reload(sequence);
          return true;
        }
        sequence.queue.shift();
        this.#leave(head);
        // The tier's word was used once: the next surprise asks it again.
        if (place !== undefined) place.verified = false;
        const check = checkStep(
          step,
          sequence.applied,
          sequence.answers,
          sequence.id,
          this.#config.name,
          head.responses !== undefined,
        );
        if (check.kind === "answered") {
          head.resolve(this.#recorded(head, check.answer));
          this.#renew(sequence);
        } else if (check.kind === "refused") {
          head.reject(check.error);
          // Refused, it changed nothing: a START among them leaves no sequence behind, an
          // END did not end one.
          if (this.#undoStart(sequence, head)) return true;
          this.#undoEnd(sequence, head);
        }
        settled = true;
        if (sequence.endReason !== undefined && sequence.idle) {
          this.#finish(sequence);
          return true;
        }
        continue;
      }
      if (this.#sequencing.inferEndRequests || !isEndRequest(head)) return settled;
      sequence.queue.shift();
      this.#leave(head);
      sequence.steps++;
      const result = { outputs: new Map(), parameters: {}, timings: head.timings(0, 0, 0, 0) };
      const row = { sequence, request: head };
      if (this.#tier !== undefined) {
        // The END frees the state everywhere once the tier has it.
        this.#model.store.delete(sequence.key);
        sequence.running = true;
        void this.#writeThrough([{ row, result, end: true }]).finally(() => {
          sequence.running = false;
          this.afterStep(sequence);
        });
        return true;
      }
      answerStep(row, result);
      if (sequence.idle) this.#finish(sequence);
      return true;
    }
  }

  /**
   * A request answered here without a run leaves its queue: with preserve_ordering it
   * takes its place behind the answers of requests already running, as one that runs does.
   */
  #leave(request: PendingRequest): void {
    request.markDispatched();
    if (this.#ordering !== undefined) takePlace(this.#ordering, request);
  }

  #recorded(request: PendingRequest, answer: StepAnswer): RequestResult {
    return { outputs: answer.outputs, parameters: answer.parameters, timings: request.timings(0, 0, 0, 0) };
  }

  slotFreed(instance: SequenceInstance): void {
    while (instance.free > 0) {
      const next = this.#backlog.shift();
      if (next === undefined) return;
      if (!this.#all.has(next)) continue;
      this.#clearBacklogTimeout(next);
      instance.bind(next);
      this.#slotTaken(next);
      next.status = next.endReason === undefined ? "active" : "ending";
      this.#startIdleClock(next);
      instance.wake(next);
    }
  }

  // ---- ends ----

  /**
   * The one place a sequence ends: frees its state and slot, counts the reason, serves the
   * next. A sequence withdrawn never began (#withdraw, withdraw): no end is counted or told
   * to model code, and the tier is written only for a record another replica may have read.
   */
  #finish(sequence: Sequence, failQueued?: ServerError): void {
    if (!this.#all.delete(sequence)) return;
    const reason = sequence.endReason ?? "end";
    // A sequence handed over to another replica has not ended: it is neither counted nor told.
    const leaving = sequence.tier?.leaving === true;
    if (leaving) this.#handedOver++;
    else if (!sequence.withdrawn) this.#ended[reason]++;
    this.#releaseId(sequence);
    this.#keepEndedAnswers(sequence, reason);
    this.#forgetEnding(sequence);
    for (const p of sequence.queue.drain())
      p.reject(failQueued ?? cancelled(`sequence ${formatSequenceId(sequence.id)} ended`));
    // Model code that keeps per-sequence data hears why, with the state, before it is freed.
    // A sequence withdrawn had run nothing: model code never saw it.
    if (!leaving && !sequence.withdrawn)
      sequence.holder?.sequenceEnded(sequence, reason, this.#model.store.get(sequence.key));
    this.#endInTier(sequence, reason);
    this.#model.store.delete(sequence.key);
    this.#clearBacklogTimeout(sequence);
    this.#clearExpiry(sequence);
    this.#clearFirstRequest(sequence);
    const successor = sequence.successor;
    const holder = sequence.holder;
    const follows = successor !== undefined && this.#all.has(successor);
    // A life that ends while its id waits in the backlog (an opened session restarted
    // before it got a slot) leaves its place to the life that restarted the id, as Triton
    // queues a START for a backlogged id with that id: not behind later sequences.
    const placeKept =
      holder === undefined && follows && this.#backlog.replace((s) => s === sequence, successor);
    if (holder === undefined && !placeKept) this.#backlog.remove((s) => s === sequence);
    if (placeKept) successor.takesOverSlot = false;

    if (holder !== undefined && follows) {
      holder.handOver(sequence, successor);
      successor.status = successor.endReason === undefined ? "active" : "ending";
      this.#startIdleClock(successor);
      holder.wake(successor);
    } else {
      if (holder !== undefined) holder.release(sequence, sequence.slot!);
      if (follows && !placeKept) this.#placeSuccessor(successor);
    }
    sequence.holder = undefined;
    this.#notifyIdle();
  }

  #placeSuccessor(successor: Sequence): void {
    // Its old life left no slot to take over: it waits like any new sequence.
    successor.takesOverSlot = false;
    try {
      this.#place(successor);
      if (successor.holder !== undefined) this.#startIdleClock(successor);
      successor.holder?.wake(successor);
    } catch (error) {
      // No slot and no room in the backlog for the sequence that restarted a backlogged id.
      successor.endReason = "evicted";
      this.#finish(successor, error instanceof ServerError ? error : undefined);
    }
  }

  /**
   * Ends `sequence` now: its queued requests fail with `error`; a running request completes
   * first. `lost` is a request of it that will not run either (one its client gave up on).
   */
  #endNow(sequence: Sequence, reason: SequenceEndReason, error: ServerError, lost?: PendingRequest): void {
    // An END that will never run did not end the sequence (its admission named the reason
    // `end`): this does, and model code and the counts are told so.
    if (
      sequence.endReason === "end" &&
      (lost?.request.sequence?.end === true || [...sequence.queue].some(isEndRequest))
    )
      this.#renameEnd(sequence, reason);
    sequence.endReason ??= reason;
    this.#releaseId(sequence);
    for (const p of sequence.queue.drain()) p.reject(error);
    if (sequence.idle) this.#finish(sequence);
  }

  /**
   * Withdraws `sequence`, a life that has not begun (#waitsToStart): its START and every
   * request queued behind it are refused with `refusal` (each under its own request id),
   * their bytes in the backlog's budget given back, and it leaves nothing behind: no end is
   * counted, model code is not told (it never saw the sequence), the tier is not written,
   * and its id is not remembered as ended, so the client's next request on the id is told
   * to START, as after a START refused before it was queued. The one way a START waiting
   * for its slot is undone: a step behind it refused for want of room
   * (--max-queued-start-bytes), or the START dropped (#undoStart).
   */
  #withdraw(sequence: Sequence, refusal: ServerError): void {
    const key = idKey(sequence.id);
    if (this.#live.get(key) === sequence) this.#live.delete(key);
    for (const p of sequence.queue.drain()) {
      const message = relabelled(refusal.message, p.request.id);
      p.reject(
        message === refusal.message
          ? refusal
          : new ServerError(refusal.code, message, {
              retryAfterSeconds: refusal.retryAfterSeconds,
              reason: refusal.reason,
            }),
      );
    }
    sequence.withdrawn = true;
    this.#finish(sequence);
  }

  /** A client gave up on a request that had not run: Triton ends the whole sequence. */
  #cancelled(sequence: Sequence, request: PendingRequest): void {
    sequence.queue.remove((p) => p === request);
    request.cancel();
    // Handing over, the sequence goes on elsewhere: a stream cut by the shutdown does not end it.
    if (this.#handingOver) return;
    if (keepsSequenceOnCancel(request.request)) {
      this.#dropped(sequence, request);
      return;
    }
    this.#endNow(
      sequence,
      "cancelled",
      cancelled(`sequence ${formatSequenceId(sequence.id)} ended: one of its requests was cancelled`),
      request,
    );
  }

  /** A sequence whose END was admitted ends for `reason` after all; its id's recent end says so. */
  #renameEnd(sequence: Sequence, reason: SequenceEndReason): void {
    sequence.endReason = reason;
    const key = idKey(sequence.id);
    const remembered = this.#recentEnds.get(key);
    if (remembered !== undefined && this.#ending.get(key) === sequence && !this.#live.has(key))
      this.#recentEnds.remember(key, { ...remembered, reason });
  }

  /**
   * A request dropped before it ran (keepsSequenceOnCancel) is undone, so that the
   * client's retry applies it once: a START that named its id leaves no sequence (a retry would otherwise be
   * refused as a START on a live id, and the sequence go on without the START's data);
   * an END gives the sequence its id back (a retry would otherwise find no sequence, and
   * the last step be lost). A server-assigned id ends with its failed START (#accept).
   */
  #dropped(sequence: Sequence, request: PendingRequest): void {
    if (this.#undoStart(sequence, request, "dropped") || this.#undoEnd(sequence, request)) return;
    // Any other END dropped this way had already released the id: the sequence ends as it asked.
    if (sequence.endReason !== undefined && sequence.idle) this.#finish(sequence);
  }

  /**
   * Ends the life `request` (a START that will not run, naming its id) began, before it
   * applied anything; whether it did. A server-assigned id ends with its failed START (#accept).
   * A life still waiting for its slot had not begun: it is withdrawn, not ended (#withdraw).
   */
  #undoStart(sequence: Sequence, request: PendingRequest, how: "refused" | "dropped" = "refused"): boolean {
    const control = request.request.sequence;
    if (control?.start !== true || control.id === undefined || sequence.applied > 0) return false;
    const key = idKey(sequence.id);
    // Its id is the life's, live, or ending by this same request's END.
    const ownEnd = control.end === true && this.#ending.get(key) === sequence && !this.#live.has(key);
    if (this.#live.get(key) !== sequence && !ownEnd) return false;
    if (sequence.holder === undefined && sequence.steps === 0 && !sequence.running) {
      this.#withdraw(
        sequence,
        cancelled(
          `sequence ${formatSequenceId(sequence.id)} is withdrawn, not started: its START request was ${how} while it waited for a slot; send the START again`,
        ),
      );
      return true;
    }
    // Dropped, its client gave up on it; refused, it failed: `forced`, as a failed START
    // with a server-assigned id ends (its handler may have run it, and is told so).
    const reason = how === "dropped" ? "cancelled" : "forced";
    if (ownEnd) sequence.endReason = reason;
    this.#endNow(
      sequence,
      reason,
      cancelled(`sequence ${formatSequenceId(sequence.id)} ended: its START request was ${how}`),
    );
    return true;
  }

  /**
   * Undoes the end `request` (an END that will not run) marked, giving the sequence its id
   * back, unless the id has gone to another life meanwhile; whether it did.
   */
  #undoEnd(sequence: Sequence, request: PendingRequest): boolean {
    const key = idKey(sequence.id);
    if (
      request.request.sequence?.end !== true ||
      sequence.endReason !== "end" ||
      this.#ending.get(key) !== sequence ||
      this.#live.has(key)
    )
      return false;
    this.#ending.delete(key);
    this.#recentEnds.forget(key);
    sequence.endReason = undefined;
    this.#live.set(key, sequence);
    if (sequence.status === "ending") sequence.status = "active";
    if (sequence.holder !== undefined && sequence.expiresAtMs === undefined) {
      this.#byArrival.set(sequence, true);
      this.#armIdleTimer();
    }
    return true;
  }

  runningRequestCancelled(sequence: Sequence, request: PendingRequest): void {
    if (this.#handingOver || keepsSequenceOnCancel(request.request)) {
      this.afterStep(sequence);
      return;
    }
    this.#endNow(
      sequence,
      "cancelled",
      cancelled(`sequence ${formatSequenceId(sequence.id)} ended: one of its requests was cancelled`),
    );
  }

  /**
   * An instance whose model code kept per-sequence data was replaced (its thread died):
   * every sequence it held ends, its queued requests failing with the reason. One whose
   * requests have all waited so far held nothing there: they run on the new thread.
   */
  #instanceFailed(instance: SequenceInstance, why: string): void {
    for (const sequence of [...this.#all]) {
      if (sequence.holder !== instance || (sequence.steps === 0 && !sequence.running)) continue;
      this.#endNow(
        sequence,
        "instance_failed",
        unavailable(
          `sequence ${formatSequenceId(sequence.id)} of model '${this.#config.name}' ended: its model instance '${instance.instanceName}' failed (${why}) and was restarted`,
        ),
      );
    }
  }

  #armBacklogTimeout(sequence: Sequence, timeoutUs: number): void {
    const deadlineMs = Date.now() + timeoutUs / 1000;
    const armed = this.#backlogTimers.has(sequence);
    if (armed && (sequence.backlogDeadlineMs ?? Number.POSITIVE_INFINITY) <= deadlineMs) return;
    sequence.backlogDeadlineMs = deadlineMs;
    this.#armBacklogTimer(sequence, deadlineMs);
  }

  #armBacklogTimer(sequence: Sequence, deadlineMs: number): void {
    this.#clearBacklogTimeout(sequence);
    const timer = setTimeout(
      () => {
        this.#backlogTimers.delete(sequence);
        if (sequence.holder !== undefined || !this.#all.has(sequence)) return;
        // A deadline further than the longest timer is reached in steps.
        if (Date.now() < deadlineMs) {
          this.#armBacklogTimer(sequence, deadlineMs);
          return;
        }
        this.#endNow(
          sequence,
          "backlog_timeout",
          unavailable("timeout of the corresponding sequence has been expired"),
        );
      },
      timerDelay(deadlineMs - Date.now()),
    );
    timer.unref();
    this.#backlogTimers.set(sequence, timer);
  }

  #clearBacklogTimeout(sequence: Sequence): void {
    clearTimer(this.#backlogTimers, sequence);
  }

  /** The sequence ends at `atMs` (epoch ms), live or backlogged, whatever it is doing. */
  #armExpiry(sequence: Sequence, atMs: number): void {
    sequence.expiresAtMs = atMs;
    if (this.#tier !== undefined && !this.#sessionCheckTimers.has(sequence))
      this.#armSessionCheck(sequence, sequence.lastArrivalMs + this.#sessionQuietMs);
    const timer = setTimeout(
      () => {
        this.#expiryTimers.delete(sequence);
        if (!this.#all.has(sequence)) return;
        if (this.#pastExpiry(sequence)) this.#expire(sequence);
        else this.#armExpiry(sequence, atMs);
      },
      timerDelay(atMs - Date.now()),
    );
    timer.unref();
    this.#expiryTimers.set(sequence, timer);
  }

  #clearExpiry(sequence: Sequence): void {
    clearTimer(this.#expiryTimers, sequence);
    clearTimer(this.#sessionCheckTimers, sequence);
  }

  #pastExpiry(sequence: Sequence): boolean {
    return sequence.expiresAtMs !== undefined && Date.now() >= sequence.expiresAtMs;
  }

  #expiredMessage(sequence: Sequence): string {
    const at = new Date(sequence.expiresAtMs ?? Date.now()).toISOString();
    return `sequence ${formatSequenceId(sequence.id)} of model '${this.#config.name}' expired at ${at}`;
  }

  /** A running request completes; queued ones fail; then the state is freed (reason "expired"). */
  #expire(sequence: Sequence): void {
    this.#clearExpiry(sequence);
    this.#endNow(sequence, "expired", cancelled(this.#expiredMessage(sequence)));
  }

  /**
   * Idle timeout, measured from each sequence's last arrival. One timer serves all: it
   * fires at the oldest sequence's deadline; arrivals only move sequences to the back.
   */
  #armIdleTimer(): void {
    if (this.#idleMs === undefined || this.#idleTimer !== undefined) return;
    const oldest = this.#byArrival.keys().next().value;
    if (oldest === undefined) return;
    // The reaper checks each deadline itself: one further than the longest timer is
    // reached in steps (Node fires a longer one after 1 ms).
    const delay = timerDelay(Math.max(1, oldest.lastArrivalMs + this.#idleMs - Date.now()));
    this.#idleTimer = setTimeout(() => {
      this.#idleTimer = undefined;
      this.#reapIdle();
      this.#armIdleTimer();
    }, delay);
    this.#idleTimer.unref();
  }

  /**
   * The idle clock runs only for sequences that hold a slot, from their last arrival or
   * from when they got the slot. Backlogged sequences used to be on it too: the reaper
   * skipped them, but the timer, re-armed for the oldest one, fired every millisecond once
   * a sequence had waited longer than the idle timeout, and a sequence that got its slot
   * after such a wait was timed out right after its first request.
   */
  #startIdleClock(sequence: Sequence, sinceMs = Date.now()): void {
    // Given a slot, one opened without a request has its whole window for one from now.
    if (this.#firstRequestTimers.has(sequence)) {
      this.#clearFirstRequest(sequence);
      this.#armFirstRequest(sequence);
    }
    // A sequence with an expiry lives until then, idle or not (see #armFirstRequest).
    if (sequence.endReason !== undefined || sequence.expiresAtMs !== undefined) return;
    sequence.lastArrivalMs = sinceMs;
    this.#byArrival.delete(sequence);
    this.#byArrival.set(sequence, true);
    this.#armIdleTimer();
  }

  /**
   * A sequence opened without a request (a session) holds its slot until its expiry once
   * it has had one; until then, at most FIRST_REQUEST_WINDOW_MS (or the idle timeout, if
   * longer): else any client could hold every slot for the whole expiry with sessions it
   * never uses (a Triton sequence takes a slot only with its first request).
   */
  #armFirstRequest(sequence: Sequence): void {
    if (this.#idleMs === undefined) return;
    const timer = setTimeout(() => {
      this.#firstRequestTimers.delete(sequence);
      if (!this.#all.has(sequence) || sequence.endReason !== undefined) return;
      // Waiting in the backlog it holds no slot: its window starts again.
      if (sequence.holder === undefined) {
        this.#armFirstRequest(sequence);
        return;
      }
      sequence.endReason = "timeout";
      this.#releaseId(sequence);
      this.#info(
        `sequence ${formatSequenceId(sequence.id)} of model '${this.#config.name}' ended: opened without a request, it had none within ${this.#firstRequestWindowMs} ms`,
      );
      if (sequence.idle) this.#finish(sequence);
    }, timerDelay(this.#firstRequestWindowMs));
    timer.unref();
    this.#firstRequestTimers.set(sequence, timer);
  }

  get #firstRequestWindowMs(): number {
    return Math.max(this.#idleMs ?? 0, this.#firstRequestWindow);
  }

  #clearFirstRequest(sequence: Sequence): void {
    clearTimer(this.#firstRequestTimers, sequence);
  }

  #reapIdle(): void {
    const now = Date.now();
    for (const sequence of this.#byArrival.keys()) {
      if (sequence.lastArrivalMs + this.#idleMs! > now) break;
      // Triton's reaper only frees slots: a backlogged sequence waits for its turn.
      if (sequence.holder === undefined) continue;
      // OVMS's cleaner passes over a sequence in use: its clock starts at its step's end.
      if (this.#idleFromLastStep && !sequence.idle) {
        this.#startIdleClock(sequence);
        continue;
      }
      // With a tier, this may be a copy of a sequence that went on, or ended, on another
      // replica, where it ends (once): the tier says before it ends here. Off the idle
      // clock meanwhile; a request that comes puts it back on.
      if (this.#mayHaveMovedOn(sequence)) {
        this.#byArrival.delete(sequence);
        this.#copyChecks.add(sequence);
        continue;
      }
      this.#timeOut(sequence);
    }
  }

  /** The idle timeout ends `sequence` (once its running request, if any, is done). */
  #timeOut(sequence: Sequence): void {
    sequence.endReason = "timeout";
    this.#releaseId(sequence);
    this.#info(
      `sequence ${formatSequenceId(sequence.id)} of model '${this.#config.name}' ended after ${this.#idleMs} ms without a request`,
    );
    if (sequence.idle) this.#finish(sequence);
  }

  /** A copy the tier holds a record of, with nothing to run here: it may be behind another replica's. */
  #mayHaveMovedOn(sequence: Sequence): boolean {
    const place = sequence.tier;
    return (
      this.#tier !== undefined &&
      place !== undefined &&
      place.version !== undefined &&
      !place.loading &&
      !place.leaving &&
      !place.ended &&
      sequence.holder !== undefined &&
      sequence.idle &&
      sequence.endReason === undefined
    );
  }

  get #sessionQuietMs(): number {
    return Math.min(this.#idleMs ?? SESSION_QUIET_MS, SESSION_QUIET_MS);
  }

  /**
   * A session's copy has no idle timeout: it would stay (live, counted, listed active)
   * until its expiry, though the session went on, or was closed, on another replica (a
   * balancer hashes a session's open on the request, its later requests on its id).
   * Once it has been quiet here a while, the tier is asked (#checkCopies).
   */
  #armSessionCheck(sequence: Sequence, atMs: number): void {
    clearTimer(this.#sessionCheckTimers, sequence);
    const timer = setTimeout(
      () => {
        this.#sessionCheckTimers.delete(sequence);
        if (!this.#all.has(sequence) || sequence.endReason !== undefined) return;
        const quietUntilMs = sequence.lastArrivalMs + this.#sessionQuietMs;
        if (quietUntilMs > Date.now()) this.#armSessionCheck(sequence, quietUntilMs);
        else if (this.#mayHaveMovedOn(sequence)) this.#copyChecks.add(sequence);
        else this.#armSessionCheck(sequence, Date.now() + this.#sessionQuietMs);
      },
      timerDelay(atMs - Date.now()),
    );
    timer.unref();
    this.#sessionCheckTimers.set(sequence, timer);
  }

  /**
   * Asks the tier about copies that reached their idle timeout, and sessions' copies quiet
   * here a while (the records' stamps, in one batch). A copy that is behind (its sequence
   * ended, or was advanced or begun again, on another replica) is let go, as
   * #lookForStaleCopies lets go: not an end here (neither counted nor told, nor logged),
   * the sequence ended or goes on there. The current copy, one without a record (its
   * record expired, or the store lost it: this copy may be all there is), and one the tier
   * did not answer for, fare as without the question: an idle copy times out, a session
   * keeps its expiry (and is asked about again after a while).
   */
  async #checkCopies(copies: readonly Sequence[]): Promise<void> {
    // Ended meanwhile (the model stopped or was reloaded too): nothing to ask.
    const asked = copies.filter((s) => this.#all.has(s) && s.endReason === undefined);
    const quietSince = asked.map((s) => s.lastArrivalMs);
    const stamps = await Promise.all(
      asked.map((s) =>
        this.#recordsOf(s.tier!)
          .stamp(s.id)
          .catch(() => null),
      ),
    );
    asked.forEach((sequence, i) => {
      if (!this.#all.has(sequence) || sequence.endReason !== undefined) return;
      const session = sequence.expiresAtMs !== undefined;
      // A request came meanwhile: the copy is not quiet, and the clocks go on from it.
      if (session && (sequence.lastArrivalMs !== quietSince[i] || !this.#mayHaveMovedOn(sequence))) {
        this.#armSessionCheck(sequence, sequence.lastArrivalMs + this.#sessionQuietMs);
        return;
      }
      if (!session && this.#byArrival.has(sequence)) return;
      const stamp = stamps[i];
      const place = sequence.tier!;
      // A version behind this copy's is a step it wrote since the look: it is current.
      const behind =
        stamp !== null &&
        stamp !== undefined &&
        this.#mayHaveMovedOn(sequence) &&
        (stamp.ended !== undefined || stamp.life !== place.life || stamp.version > (place.version ?? 0));
      if (behind) {
        place.leaving = true;
        sequence.endReason = "end";
        this.#finish(sequence);
      } else if (session) {
        this.#armSessionCheck(sequence, Date.now() + SESSION_QUIET_MS);
      } else {
        this.#timeOut(sequence);
      }
    });
  }

  // ---- Scheduler lifecycle ----

  #settled(): void {
    this.#pending--;
    this.#notifyIdle();
  }

  /** No request is pending: every accepted step has run and been answered. */
  #notifySettled(): void {
    if (this.#pending === 0) for (const waiter of this.#settleWaiters.splice(0)) waiter();
  }

  #notifyIdle(): void {
    this.#notifySettled();
    if (this.#pending !== 0 || this.#all.size !== 0) return;
    for (const waiter of this.#idleWaiters.splice(0)) waiter();
  }

  beginShutdown(): void {
    this.#shuttingDown = true;
  }

  /** The model is gone (after drain): its store no longer counts in the server's state budget. */
  leaveStateBudget(): void {
    this.#leaveBudget();
  }

  /**
   * Lets live sequences run to their end until `deadlineMs`, then ends the rest with
   * `reason` ("shutdown" when the server stops, "unloaded" when only the model goes). An
   * unloaded model's sequences can no longer be reached: only the requests it holds are
   * waited for, as Triton's unload waits for the requests in flight.
   */
  async drain(deadlineMs: number, reason: DrainReason = "shutdown"): Promise<void> {
    this.#shuttingDown = true;
    if (this.#tier !== undefined) {
      await this.#handOver(deadlineMs);
      return;
    }
    const unloaded = reason === "unloaded";
    if (this.#pending > 0 || (!unloaded && this.#all.size > 0)) {
      await new Promise<void>((resolve) => {
        // Referenced: whoever awaits the drain (a stopping server, an embedding program)
        // must still be running when it ends, even with nothing else left to wait for.
        const timer = setTimeout(resolve, timerDelay(deadlineMs - Date.now()));
        (unloaded ? this.#settleWaiters : this.#idleWaiters).push(() => {
          clearTimeout(timer);
          resolve();
        });
      });
    }
    const error =
      reason === "shutdown"
        ? stopping("the server is shutting down")
        : unavailable(`model '${this.#config.name}' was unloaded`);
    for (const sequence of [...this.#all]) this.#endNow(sequence, reason, error);
    if (this.#idleTimer !== undefined) clearTimeout(this.#idleTimer);
    if (this.#pending > 0) await new Promise<void>((resolve) => this.#idleWaiters.push(resolve));
  }

  // ---- the shared tier (write-through state, fencing, hand-over) ----

  /** Handing the sequences over to other replicas: the server stops, and the tier keeps them. */
  get #handingOver(): boolean {
    return this.#tier !== undefined && this.#shuttingDown;
  }

  /** The records that hold a sequence's record: this version's, or those it is moving from. */
  #recordsOf(place: TierPlace): ModelTier {
    return place.movingFrom ?? this.#tier!;
  }

  #newPlace(): TierPlace | undefined {
    if (this.#tier === undefined) return undefined;
    return {
      life: randomUUID(),
      version: undefined,
      loading: false,
      stale: false,
      ended: false,
      verified: true,
      leaving: false,
    };
  }

  #describe(id: SequenceId): string {
    return `sequence ${formatSequenceId(id)} of model '${this.#config.name}'`;
  }

  #leavingError(id: SequenceId): ServerError {
    return new ServerError(
      "UNAVAILABLE",
      `${this.#describe(id)} is moving to another replica: this one is shutting down; retry the request`,
      { retryAfterSeconds: 1, reason: "server_stopping" },
    );
  }

  /**
   * `forStep`: the request that failed is a step of the sequence, which `sequence_step`
   * makes safe to retry (an operator's end, a close or an open is safe to retry as it is).
   */
  #tierError(id: SequenceId, what: string, error: unknown, forStep = true): ServerError {
    const tier = this.#tier!.tier;
    const advice = forStep
      ? "retry the request (with sequence_step, a step that was applied is answered, not run again)"
      : "retry the request";
    return new ServerError(
      "UNAVAILABLE",
      `${what} ${this.#describe(id)} in the state store at ${tier.location} failed (${(error as Error).message ?? String(error)}); ${advice}`,
      { retryAfterSeconds: 1, cause: error },
    );
  }

  /**
   * A step whose write failed. A refusal changed nothing, and the step is retried as any
   * (#tierError). A write the store was sent and did not answer (TierAnswerLost: it timed
   * out, or its connection closed) may have landed, or may land yet when the store
   * answers again: the step may have been applied, and only its sequence_step makes a
   * retry safe (one applied is answered from its recorded answer); a retry without one
   * may apply it twice. The client is told so rather than that it failed, and as
   * DEADLINE_EXCEEDED (504), with no Retry-After: UNAVAILABLE (503, Retry-After, gRPC's
   * retry pushback) is what client libraries, gateways and gRPC retry policies retry on
   * their own, without a sequence_step, and OVMS's clients never send one.
   */
  #stepWriteError(id: SequenceId, error: unknown): ServerError {
    if (!(error instanceof TierAnswerLost)) return this.#tierError(id, "writing the state of", error);
    return new ServerError(
      "DEADLINE_EXCEEDED",
      `writing the state of ${this.#describe(id)} in the state store at ${this.#tier!.tier.location} was not confirmed (${error.message}): the step may have been applied, or may be when the store answers; retry it with its sequence_step to have it applied once (without one, a retry may apply it twice)`,
      { cause: error },
    );
  }

  /** What a request for a sequence that ended on another replica (or whose record is gone) is told. */
  /** `exclusive`: asked by a client with OVMS's admission, told as OVMS tells a missing sequence. */
  /** `record`: the tier's record of it, when read (it may say where a reload moved the sequence). */
  #endedElsewhere(
    id: SequenceId,
    reason: SequenceEndReason,
    exclusive: boolean,
    record?: TierRecord | undefined,
  ): ServerError {
    if (record?.ended !== undefined && record.movedTo !== undefined)
      return this.#movedError(id, record.movedTo);
    if (reason === "state_lost") return this.#lostError(id);
    if (record === undefined && reason === "timeout") {
      // What is known of a record gone without an end: Redis let it go, or someone did.
      return this.#unknownId(
        id,
        exclusive,
        reason,
        `its record is no longer in the state store at ${this.#tier!.tier.location} (it expired after the sequence's idle timeout, or was evicted or deleted)`,
      );
    }
    return this.#unknownId(id, exclusive, reason);
  }

  /**
   * A sequence that another replica moved to another version of the model (by a reload, or
   * taking it over: #readForLookUp): this replica, serving the version whose record it
   * left, must not advance that record (the sequence would fork); a replica serving the
   * version it went to goes on with it.
   */
  #movedError(id: SequenceId, movedTo: string): ServerError {
    const model = this.#config.name;
    return new ServerError(
      "UNAVAILABLE",
      `${this.#describe(id)} moved to version ${movedTo} of model '${model}'; this replica serves version ${this.#tier!.version}: send its requests to a replica serving version ${movedTo}`,
      { retryAfterSeconds: 1 },
    );
  }

  #lostError(id: SequenceId): ServerError {
    const tier = this.#tier!.tier;
    const at = new Date(tier.dataLostAtMs ?? Date.now()).toISOString();
    return new ServerError(
      "FAILED_PRECONDITION",
      `the state of ${this.#describe(id)} was lost: the state store at ${tier.location} lost its data at ${at} (it restarted without persistence); start the sequence again`,
      { reason: "sequence_unknown" },
    );
  }

  #expiry(sequence: { readonly expiresAtMs: number | undefined }): TierExpiry {
    if (sequence.expiresAtMs !== undefined) return { kind: "at", epochMs: sequence.expiresAtMs };
    return this.#idleMs === undefined
      ? { kind: "never" }
      : { kind: "idle", ms: Math.ceil(this.#idleMs) + IDLE_RECORD_GRACE_MS };
  }

  #body(
    sequence: Sequence,
    applied: number,
    answers: StepAnswers | undefined,
    withState: boolean,
  ): Uint8Array {
    return encodeRecordBody({
      applied,
      state: withState ? this.#model.store.get(sequence.key) : undefined,
      answers: answers?.all ?? [],
      createdMs: sequence.createdMs,
      expiresAtMs: sequence.expiresAtMs,
      owner: sequence.owner,
    });
  }

  /**
   * Takes the tier's record into `sequence`: its state, steps, answers and version. Throws,
   * changing nothing, when the state has no room in the server's budget, unless the
   * sequence is `ending` (closed, or an END waits for it: its state is freed); the record
   * stays in the tier, for a replica with room or a retry.
   */
  #install(
    sequence: Sequence,
    record: TierRecord,
    body = decodeRecordBody(record.body, this.#describe(sequence.id)),
    ending = false,
  ): void {
    if (body.state !== undefined && !ending) {
      const refusal = this.#model.budget?.refusal(
        this.#model.store.bytesOf(sequence.key),
        this.#model.store.bytesFor(body.state),
        () => ({ model: this.#config.name, id: formatSequenceId(sequence.id), starts: false }),
      );
      if (refusal !== undefined) throw refusal;
    }
    const place = sequence.tier ?? this.#newPlace()!;
    sequence.tier = place;
    place.life = record.life;
    place.version = record.version;
    place.stale = false;
    place.verified = true;
    sequence.applied = body.applied;
    sequence.steps = body.applied;
    sequence.answers = body.answers.length === 0 ? undefined : new StepAnswers(body.answers);
    if (body.state === undefined) this.#model.store.delete(sequence.key);
    else this.#model.store.set(sequence.key, body.state);
  }

  /**
   * Requests that wait for the tier at once (a record's read, or a block of ids) are
   * bounded like admitted ones: as many as the model's slots and backlog hold, at most
   * MAX_WAITING_FOR_TIER. A client sending steps for many unknown ids cannot make this
   * replica hold their requests without limit while Redis answers.
   */
  #checkRoomToWait(): void {
    if (this.#roomToWaitForTier) return;
    throw new ServerError(
      "UNAVAILABLE",
      `model '${this.#config.name}' has ${this.#waitingForTier} requests waiting for the state store at ${this.#tier!.tier.location}; retry later`,
      { retryAfterSeconds: 1, reason: "sequence_limit" },
    );
  }

  /** Another request may wait for the tier (see #checkRoomToWait). */
  get #roomToWaitForTier(): boolean {
    return (
      this.#waitingForTier < Math.min(this.capacity + this.#sequencing.backlogLimit, MAX_WAITING_FOR_TIER)
    );
  }

  /** Admission waits for the tier's record of `id` (one read for every request that waits). */
  #lookUp(key: string, id: SequenceId, pending: PendingRequest): void {
    this.#checkRoomToWait();
    this.#waitingForTier++;
    this.#pending++;
    const waiting = this.#looks.get(key);
    if (waiting !== undefined) {
      waiting.push(pending);
      return;
    }
    this.#looks.set(key, [pending]);
    const held = this.#live.get(key);
    this.#readForLookUp(id, pending).then(
      ({ record, from }) => this.#looked(key, id, record, held, from),
      (error: unknown) => {
        const failed = this.#looks.get(key) ?? [];
        this.#looks.delete(key);
        this.#pending -= failed.length;
        this.#waitingForTier -= failed.length;
        const refusal = error instanceof ServerError ? error : this.#tierError(id, "reading", error);
        for (const p of failed) p.reject(refusal);
        this.#notifyIdle();
      },
    );
  }

  /**
   * The tier's record of `id` for a request that finds no sequence here. When this
   * version's records hold none and the request is no START, the records of the model's
   * versions this replica does not serve are looked in (a rolling upgrade: the sequence
   * began on a replica serving a version that is gone from here, and may go on here, even
   * while other replicas still serve that version): a live record there whose version has
   * this version's state signature is taken over as a reload takes a sequence over
   * (`from`, the records it moves from, fencing them, before its first step here: nothing
   * is lost); one whose state differs cannot go on here, and the request is told which
   * version to send it to, never that the sequence is unknown. A version served here is
   * another model, as each version is in Triton, with its own scheduler: a step to this
   * version never takes over its sequences (ModelTier.findElsewhere leaves them out).
   */
  async #readForLookUp(
    id: SequenceId,
    pending: PendingRequest,
  ): Promise<{ readonly record: TierRecord | undefined; readonly from?: ModelTier }> {
    const here = this.#tier!;
    const record = await here.read(id);
    if (record !== undefined || pending.request.sequence?.start === true) return { record };
    const [found] = await here.findElsewhere(id);
    if (found === undefined) return { record };
    if (found.stateSignature !== this.stateSignature) {
      throw new ServerError(
        "UNAVAILABLE",
        `${this.#describe(id)} is live in version ${found.version} of model '${this.#config.name}', whose state differs from version ${here.version}'s, served here ([${found.stateSignature ?? "not known"}] there, [${this.stateSignature}] here): send its requests to a replica serving version ${found.version}`,
        { retryAfterSeconds: 1 },
      );
    }
    return { record: found.record, from: found.records };
  }

  /**
   * `held`: the copy of the id this replica held when it asked (a START asks about it);
   * `from`: the other version's records that `record` is in (#readForLookUp).
   */
  #looked(
    key: string,
    id: SequenceId,
    record: TierRecord | undefined,
    held: Sequence | undefined,
    from?: ModelTier,
  ): void {
    const waiting = this.#looks.get(key) ?? [];
    this.#looks.delete(key);
    this.#pending -= waiting.length;
    this.#waitingForTier -= waiting.length;
    try {
      const local = this.#live.get(key);
      if (
        local !== undefined &&
        local === held &&
        local.tier?.version !== undefined &&
        (record === undefined || record.ended !== undefined || record.life !== local.tier.life)
      ) {
        // A copy here of a life that is over elsewhere: it ends here without writing, and
        // the START is judged on what the tier holds.
        local.tier.ended = true;
        const reason =
          record !== undefined && record.ended === undefined ? "restart" : this.#goneReason(record, local);
        this.#endNow(local, reason, this.#endedElsewhere(id, reason, waiting.some(isExclusive), record));
      }
      if (record !== undefined && record.ended === undefined) {
        if (!this.#live.has(key) && !this.#ending.has(key)) {
          if (!this.#roomToPlace && !waiting.some((p) => this.#waitedForRoom.has(p))) {
            // No room to take it up: the slots may hold copies of sequences that moved on,
            // as for a START. Its requests wait for the tier to say which, and are then
            // admitted again, reading its record again (it may have moved on meanwhile).
            for (const p of waiting) {
              try {
                this.#admitAfterLook(p, this.#slotsFullError(), false);
              } catch (error) {
                p.reject(asServerError(error));
              }
            }
            this.#notifyIdle();
            return;
          }
          this.#adoptFromTier(key, id, record, waiting.some(isEndRequest), from);
        }
      } else if (record !== undefined) {
        this.#recentEnds.remember(key, {
          reason: record.ended as SequenceEndReason,
          endedAtMs: record.writtenAtMs,
          movedTo: record.movedTo,
        });
      }
    } catch (error) {
      for (const p of waiting) p.reject(asServerError(error));
      this.#notifyIdle();
      return;
    }
    for (const p of waiting) {
      // The retry of a step that ended its sequence (its END) gets the END's answer.
      if (this.#answerFromEnded(p, record)) continue;
      try {
        this.#admit(p, true);
      } catch (error) {
        p.reject(asServerError(error));
      }
    }
    // The tier's word was read for these requests: when none of them waits on the copy
    // (all were refused or answered), it must not vouch for a later request.
    const copy = this.#live.get(key);
    if (copy?.tier !== undefined && copy.queue.length === 0) copy.tier.verified = false;
    this.#notifyIdle();
  }

  /**
   * A sequence this replica did not hold, taken up from the tier's record (`ending`: see
   * #install); `from`: another version's records that hold it (#readForLookUp).
   */
  #adoptFromTier(
    key: string,
    id: SequenceId,
    record: TierRecord,
    ending = false,
    from?: ModelTier,
  ): Sequence {
    const body = decodeRecordBody(record.body, this.#describe(id));
    const sequence = new Sequence(id, body.createdMs, body.owner);
    sequence.expiresAtMs = body.expiresAtMs;
    this.#install(sequence, record, body, ending);
    if (from !== undefined) {
      // As a sequence a reload moved here (#adoptOne): its record moves into this
      // version's records before its first step (#moveRecord), from the current record.
      const place = sequence.tier!;
      place.movingFrom = from;
      place.stale = true;
      place.verified = false;
      this.#info(
        `${this.#describe(id)} is taken over from version ${from.version}, where it began on another replica: its record moves to version ${this.#tier!.version} with its state before its next step here (nothing is lost); replicas serving version ${from.version} then refuse it, naming version ${this.#tier!.version}`,
      );
    }
    try {
      this.#place(sequence);
    } catch (error) {
      this.#model.store.delete(sequence.key);
      throw error;
    }
    this.#tierLoaded++;
    this.#all.add(sequence);
    this.#live.set(key, sequence);
    this.#recentEnds.forget(key);
    if (body.expiresAtMs !== undefined) this.#armExpiry(sequence, body.expiresAtMs);
    if (sequence.holder !== undefined) this.#startIdleClock(sequence);
    return sequence;
  }

  /** A START without an id waits for the tier to reserve more ids. */
  #waitForIds(pending: PendingRequest): void {
    this.#checkRoomToWait();
    this.#waitingForTier++;
    this.#pending++;
    this.#ids!.ready().then(
      () => this.#readmit(pending, false),
      (error: unknown) => {
        this.#pending--;
        this.#waitingForTier--;
        pending.reject(
          unavailable(
            `model '${this.#config.name}' cannot assign a sequence id: the state store at ${this.#tier!.tier.location} did not answer (${(error as Error).message})`,
            1,
          ),
        );
        this.#notifyIdle();
      },
    );
  }

  /**
   * A request that wrote nothing (a retried step answered from its recorded answer, a step
   * refused by its number or failed in the model) started the sequence's idle clock again
   * here, as on one server: the record's expiry in the tier starts again too, or Redis
   * would let the record go while this replica holds the sequence, and its next step
   * would be told that it timed out. Renewing rather than leaving the idle clock as it was
   * keeps one server's behaviour, where any request keeps its sequence alive. Fenced on
   * the version and life held here (a record another replica moved on is renewed by its
   * writes), and best effort: a renewal that fails leaves the record to expire when it
   * would have.
   */
  #renew(sequence: Sequence): void {
    const place = sequence.tier;
    if (
      this.#tier === undefined ||
      this.#handingOver ||
      sequence.endReason !== undefined ||
      place?.version === undefined ||
      place.ended
    )
      return;
    // An absolute expiry (a SageMaker session's) or none does not move with requests.
    const expiry = this.#expiry(sequence);
    if (expiry.kind !== "idle") return;
    this.#recordsOf(place)
      .renew(sequence.id, { version: place.version, life: place.life }, expiry)
      .catch(() => {});
  }

  /** Reads the tier's record again before the sequence's next step (it does not run meanwhile). */
  #reload(sequence: Sequence): void {
    const place = sequence.tier!;
    if (place.movingFrom !== undefined) {
      this.#moveRecord(sequence, place.movingFrom);
      return;
    }
    place.loading = true;
    this.#tier!.read(sequence.id).then(
      (record) => {
        place.loading = false;
        if (!this.#all.has(sequence)) return;
        if (place.version === undefined && this.#stillOnlyLife(sequence, record)) {
          // A copy the tier has never held, and no other life of the id since it began: it
          // goes on from what it holds, as on one server (its first write is a `create`,
          // which a life begun elsewhere meanwhile still fences).
          place.stale = false;
          place.verified = true;
          this.#goOn(sequence);
          return;
        }
        if (record !== undefined && record.ended === undefined) {
          if (this.#endIfAnotherCallers(sequence, record)) return;
          try {
            const head = sequence.queue.peek();
            this.#install(sequence, record, undefined, head !== undefined && isEndRequest(head));
          } catch (error) {
            for (const p of sequence.queue.drain()) p.reject(asServerError(error));
          }
        } else {
          place.ended = true;
          const reason = this.#goneReason(record, sequence);
          const head = sequence.queue.peek();
          if (head !== undefined && this.#answerFromEnded(head, record)) sequence.queue.shift();
          const ended = this.#endedElsewhere(
            sequence.id,
            reason,
            head !== undefined && isExclusive(head),
            record,
          );
          // A START that reached this old copy (taken for the retry of the START it began
          // with) begins the id anew once the copy is gone: it and what follows it are
          // told to come again, rather than that the sequence has ended.
          let restarting = false;
          for (const p of sequence.queue.drain()) {
            restarting ||= p.request.sequence?.start === true;
            p.reject(restarting ? this.#startAgain(sequence.id) : ended);
          }
          this.#endNow(sequence, reason, ended);
          return;
        }
        this.afterStep(sequence);
      },
      (error: unknown) => {
        place.loading = false;
        // The head request fails; the record is read again before the next one.
        sequence.queue.shift()?.reject(this.#tierError(sequence.id, "reading", error));
        this.afterStep(sequence);
      },
    );
  }

  /**
   * Whether `record` (the tier's, read for a copy of `sequence` that the tier has never
   * held) leaves the copy the id's only life: there is no record (and the store has not
   * lost its data since the sequence began), or only the end of another life, written
   * before this one began. A live record is a life begun or going on elsewhere, and the
   * copy takes it; the end of a life begun after this one ends the copy too. (Ends are
   * dated by the clock of the replica that wrote them: between replicas whose clocks
   * differ, an end written within that difference of this life's start may be judged
   * either way; either way nothing live is overwritten.)
   */
  #stillOnlyLife(sequence: Sequence, record: TierRecord | undefined): boolean {
    if (record === undefined) {
      const lostAtMs = this.#tier!.tier.dataLostAtMs;
      return lostAtMs === undefined || sequence.createdMs > lostAtMs;
    }
    return (
      record.ended !== undefined &&
      record.life !== sequence.tier!.life &&
      record.writtenAtMs < sequence.createdMs
    );
  }

  /**
   * Before the first step of a sequence a reload moved here from another version of the
   * model, its record moves from that version's records into this one's, fencing the old
   * record (ModelTier.moveFrom), and the sequence goes on from the record moved: the
   * current one, with any step another replica serving the old version made meanwhile.
   * As a read (#reload), the sequence does not run meanwhile.
   */
  #moveRecord(sequence: Sequence, from: ModelTier): void {
    const place = sequence.tier!;
    place.loading = true;
    this.#moveRecordFrom(from, sequence).then(
      (outcome) => {
        place.loading = false;
        if (!this.#all.has(sequence)) return;
        if (outcome.kind === "occupied") {
          place.movingFrom = undefined;
          place.ended = true;
          const error = cancelled(
            `${this.#describe(sequence.id)} ended: version ${this.#tier!.version} of the model, where a reload moved it, already holds a live sequence with its id, started on another replica`,
          );
          for (const p of sequence.queue.drain()) p.reject(error);
          this.#endNow(sequence, "reloaded", error);
          return;
        }
        place.movingFrom = undefined;
        if (outcome.kind === "moved") {
          try {
            const head = sequence.queue.peek();
            this.#install(sequence, outcome.record, undefined, head !== undefined && isEndRequest(head));
          } catch (error) {
            for (const p of sequence.queue.drain()) p.reject(asServerError(error));
          }
          this.afterStep(sequence);
          return;
        }
        // Gone from the old records (ended there, or expired), or another caller's life:
        // the copy ends as one whose record is read again does.
        const record = outcome.record;
        if (record !== undefined && record.ended === undefined && this.#endIfAnotherCallers(sequence, record))
          return;
        place.ended = true;
        const reason = this.#goneReason(record, sequence);
        const error = this.#endedElsewhere(sequence.id, reason, false, record);
        for (const p of sequence.queue.drain()) p.reject(error);
        this.#endNow(sequence, reason, error);
      },
      (error: unknown) => {
        place.loading = false;
        // The head request fails; the record is moved before the next one (still stale).
        sequence.queue.shift()?.reject(this.#tierError(sequence.id, "moving the record of", error));
        this.afterStep(sequence);
      },
    );
  }

  /** The tier's side of #moveRecord: reads the old record, and moves it if it is live. */
  async #moveRecordFrom(
    from: ModelTier,
    sequence: Sequence,
  ): Promise<
    | { readonly kind: "moved"; readonly record: TierRecord }
    | { readonly kind: "gone"; readonly record: TierRecord | undefined }
    | { readonly kind: "occupied" }
  > {
    const place = sequence.tier!;
    const here = this.#tier!;
    let record = await from.read(sequence.id);
    for (let tries = 1; ; tries++) {
      if (record?.movedTo === here.version && record.life === place.life) {
        // Moved already, by an earlier try whose answer was lost.
        const moved = await here.read(sequence.id);
        if (moved?.life === place.life && moved.ended === undefined) return { kind: "moved", record: moved };
        return { kind: "gone", record: moved };
      }
      if (record === undefined || record.ended !== undefined) return { kind: "gone", record };
      const body = decodeRecordBody(record.body, this.#describe(sequence.id));
      if (body.owner !== sequence.owner) return { kind: "gone", record };
      const result = await here.moveFrom(from, {
        id: sequence.id,
        expect: { version: record.version, life: record.life },
        body: record.body,
        fencedBody: encodeRecordBody({ ...body, state: undefined }),
        endReason: "reloaded",
        expiry: this.#expiry(sequence),
      });
      if (result.kind === "moved") {
        return { kind: "moved", record: { ...record, version: result.version, ended: undefined } };
      }
      if (result.kind === "occupied") return { kind: "occupied" };
      if (tries >= MAX_STEP_RETRIES) {
        throw new Error(`it was advanced by another replica while being moved, ${tries} times in a row`);
      }
      this.#tierConflicts++;
      record = result.current;
    }
  }

  /**
   * The tier holds a new life of the id that another caller started (this copy's life
   * ended elsewhere, and the id was started again under another API key): this copy ends
   * here, without writing to the tier, and its requests are refused as the new owner's
   * sequence refuses them. The id's next request reads the new life from the tier.
   */
  #endIfAnotherCallers(sequence: Sequence, record: TierRecord, running?: PendingRequest): boolean {
    const place = sequence.tier!;
    if (record.life === place.life) return false;
    let owner: string | undefined;
    try {
      owner = decodeRecordBody(record.body, this.#describe(sequence.id)).owner;
    } catch {
      return false;
    }
    if (owner === sequence.owner) return false;
    place.ended = true;
    const error = this.#ownerError(sequence.id);
    running?.reject(error);
    this.#endNow(sequence, "restart", error);
    return true;
  }

  /**
   * Why `sequence` is over when the tier has no live record of it: the record of its end
   * says; with none, the store's loss of its data is to blame only if the sequence began
   * before the loss (a later one's record expired, was evicted or deleted), else its
   * record's expiry is the likely cause (timeout).
   */
  #goneReason(record: TierRecord | undefined, sequence: Sequence): SequenceEndReason {
    if (record?.ended !== undefined) return record.ended as SequenceEndReason;
    const lostAtMs = this.#tier!.tier.dataLostAtMs;
    return lostAtMs !== undefined && sequence.createdMs <= lostAtMs ? "state_lost" : "timeout";
  }

  /**
   * Writes the new state of steps that ran (already in the store) through to the tier in
   * one round trip, then answers each: written, it is answered; another replica having
   * advanced the sequence, the step runs again on the tier's state; the sequence having
   * ended elsewhere, the request is told so.
   */
  async #writeThrough(steps: readonly StepDone[]): Promise<void> {
    const writes: TierWrite[] = [];
    const answers: (StepAnswers | undefined)[] = [];
    for (const step of steps) {
      const { row, result, end } = step;
      const sequence = row.sequence;
      const place = sequence.tier!;
      const numbered = row.request.request.sequence?.step;
      const kept =
        numbered === undefined || row.request.responses !== undefined
          ? sequence.answers
          : (sequence.answers ?? new StepAnswers()).with(stepAnswer(numbered, result));
      answers.push(kept);
      const exclusive = row.request.request.sequence?.admission === "exclusive";
      const fresh = place.version === undefined;
      // A START writes its new life whatever the tier holds (it restarts the id, as on one
      // server); a first write that is no START (its START failed, and wrote nothing) must
      // not replace a life begun on another replica meanwhile.
      const starts = row.request.request.sequence?.start === true;
      writes.push({
        id: sequence.id,
        mode: writeMode({ end, fresh, starts, exclusive }),
        ...(fresh ? {} : { expect: { version: place.version!, life: place.life } }),
        life: place.life,
        body: this.#body(sequence, sequence.applied + 1, kept, !end),
        ...(end ? { endReason: "end" } : {}),
        expiry: this.#expiry(sequence),
      });
    }
    // Ends and steps are written apart (in the same round trip): a store that refuses the
    // steps' new state (a full Redis) still takes the ends, which free state.
    const groups = [
      steps.flatMap((step, i) => (step.end ? [i] : [])),
      steps.flatMap((step, i) => (step.end ? [] : [i])),
    ].filter((group) => group.length > 0);
    await Promise.all(
      groups.map(async (group) => {
        let results: TierWriteResult[];
        try {
          results = await this.#tier!.write(group.map((i) => writes[i]!));
        } catch (error) {
          this.#tierWriteFailures += group.length;
          for (const i of group) {
            const { row, end } = steps[i]!;
            // A START the store did not take leaves no sequence behind, as one the model
            // refused (a retry finds its record if the write did land).
            if (writes[i]!.expect === undefined && row.request.request.sequence?.start === true)
              row.sequence.startNotKept = row.request;
            // What this replica holds is ahead of what the tier confirms: read it again first.
            row.sequence.tier!.stale = true;
            // The step's state, in the store since the run, was never kept: it leaves, so
            // that state_bytes and the budget count only state the sequence has (the read
            // before its next step brings back what the tier holds).
            this.#model.store.delete(row.sequence.key);
            // An END whose write failed is not written again as a bare end when its sequence
            // finishes here: that end would carry no answer for the END, and its retry (as
            // the error asks) would find the sequence ended and its answer gone. The record
            // is left as the tier has it: the retry applies the END, or finds its answer.
            if (end) row.sequence.tier!.ended = true;
            row.request.reject(this.#stepWriteError(row.sequence.id, error));
          }
          return;
        }
        group.forEach((i, k) => {
          this.#written(steps[i]!, writes[i]!, answers[i], results[k]!);
        });
      }),
    );
  }

  #written(
    step: StepDone,
    write: TierWrite,
    answers: StepAnswers | undefined,
    result: TierWriteResult,
  ): void {
    const { row, result: answer, end } = step;
    const sequence = row.sequence;
    const place = sequence.tier!;
    if (result.kind === "written") {
      place.version = result.version;
      place.verified = false;
      if (end) place.ended = true;
      sequence.applied++;
      sequence.answers = answers;
      row.request.resolve(answer);
      return;
    }
    this.#tierConflicts++;
    const current = result.current;
    if (write.mode === "new_exclusive") {
      // Another replica started the id first: this START is refused, as on one server.
      place.ended = true;
      const error = new ServerError(
        "ALREADY_EXISTS",
        `${this.#describe(sequence.id)} already exists: end it before starting it again`,
        { reason: "sequence_exists" },
      );
      row.request.reject(error);
      this.#endNow(sequence, "forced", error);
      return;
    }
    if (current !== undefined && current.ended === undefined && this.#all.has(sequence)) {
      if (this.#endIfAnotherCallers(sequence, current, row.request)) return;
      // Another replica advanced (or restarted) the sequence meanwhile: this step runs
      // again on what the tier holds, never on top of a state that was not current.
      const tries = (this.#retries.get(row.request) ?? 0) + 1;
      try {
        this.#install(sequence, current, undefined, isEndRequest(row.request));
      } catch (error) {
        row.request.reject(asServerError(error));
        return;
      }
      if (tries > MAX_STEP_RETRIES) {
        row.request.reject(
          unavailable(
            `${this.#describe(sequence.id)} was advanced by another replica at the same time, ${tries} times in a row; retry the request`,
            1,
          ),
        );
        return;
      }
      this.#retries.set(row.request, tries);
      row.request.leaveGate();
      sequence.queue.unshift(row.request);
      return;
    }
    place.ended = true;
    const reason = this.#goneReason(current, sequence);
    const error = this.#endedElsewhere(sequence.id, reason, isExclusive(row.request), current);
    // A retried END that another replica applied: its answer is kept with the ended record.
    if (!this.#answerFromEnded(row.request, current)) row.request.reject(error);
    this.#endNow(sequence, reason, error);
  }

  /** Answers a numbered request whose step the ended sequence `record` recorded; false when it did not. */
  #answerFromEnded(request: PendingRequest, record: TierRecord | undefined): boolean {
    const step = request.request.sequence?.step;
    // A START on an ended id begins it anew, as on one server: it is no retry.
    if (step === undefined || record?.ended === undefined || request.request.sequence?.start === true)
      return false;
    let body: SequenceRecordBody;
    try {
      body = decodeRecordBody(record.body, "an ended sequence");
    } catch {
      return false;
    }
    const answer = body.answers.find((a) => a.step === step);
    if (answer === undefined) return false;
    if (!request.dispatched) this.#leave(request);
    // The record keeps the sequence's owner: another caller is refused, as it was while
    // the sequence lived, rather than handed the owner's answer.
    if (body.owner !== request.request.principal)
      request.reject(this.#ownerError(request.request.sequence!.id!));
    else request.resolve(this.#recorded(request, answer));
    return true;
  }

  /**
   * Without a tier, a sequence that ended by its END (or a close) keeps the answers of its
   * last numbered steps a while, as the tier's ended record keeps them: a retried END
   * whose answer was lost gets it (#answerFromEndedHere). Any other end of the id, with or
   * without answers, replaces what an earlier life left.
   */
  #keepEndedAnswers(sequence: Sequence, reason: SequenceEndReason): void {
    const key = idKey(sequence.id);
    if (this.#tier !== undefined || this.#live.has(key) || sequence.tier?.leaving === true) return;
    if (reason === "end" && sequence.answers !== undefined)
      this.#endedAnswers.remember(key, { owner: sequence.owner, answers: sequence.answers });
    else this.#endedAnswers.forget(key);
  }

  /**
   * Answers a numbered request (not a START) for id `key`, which no sequence holds, from
   * the answers its sequence left when it ended here by its END; false when it left none
   * for its step. As #answerFromEnded does with a tier's ended record.
   */
  #answerFromEndedHere(request: PendingRequest, key: string): boolean {
    const step = request.request.sequence?.step;
    // A life of the id whose END is still running left nothing yet: its step is not judged on an older life's answers.
    if (this.#tier !== undefined || step === undefined || this.#ending.has(key)) return false;
    const ended = this.#endedAnswers.get(key);
    const answer = ended?.answers.get(step);
    if (ended === undefined || answer === undefined) return false;
    if (ended.owner !== request.request.principal) throw this.#ownerError(request.request.sequence!.id!);
    this.#leave(request);
    request.resolve(this.#recorded(request, answer));
    return true;
  }

  /** The tier learns of an end decided here (a timeout, a cancellation, an operator's DELETE, a close…). */
  #endInTier(sequence: Sequence, reason: SequenceEndReason): void {
    const place = sequence.tier;
    if (this.#tier === undefined || place === undefined) return;
    const closing = place.closing;
    place.closing = undefined;
    const force = reason === "forced";
    if (
      place.ended ||
      (place.leaving && closing === undefined) ||
      UNRECORDED_ENDS.has(reason) ||
      (!force && place.version === undefined)
    ) {
      closing?.resolve();
      return;
    }
    place.ended = true;
    const write: TierWrite = {
      id: sequence.id,
      mode: force ? "force_end" : "end",
      ...(place.version === undefined ? {} : { expect: { version: place.version, life: place.life } }),
      life: place.life,
      body: this.#body(sequence, sequence.applied, sequence.answers, false),
      endReason: reason,
      expiry: { kind: "never" },
    };
    const records = this.#recordsOf(place);
    if (closing !== undefined) {
      void this.#writeClose(records, write, closing);
      return;
    }
    // An end this replica decided on a copy that another replica has since advanced (an
    // idle timeout here while the sequence goes on there) is not written: the conflict
    // is the answer.
    records.write([write]).catch((error: unknown) => {
      this.#tierWriteFailures++;
      this.#warn(
        `the end of ${this.#describe(sequence.id)} (${reason}) could not be written to the state store at ${this.#tier!.tier.location}: ${(error as Error).message}; ${this.#idleMs === undefined && sequence.expiresAtMs === undefined ? "its record stays live until another replica ends it, or a START begins the id anew" : "its record expires by itself"}`,
      );
    });
  }

  /**
   * A client's close (or an operator's end) holds whatever this replica's copy is: when
   * another replica has advanced the sequence since, the close ends the record the tier
   * holds now. It settles once the tier holds the end, or the sequence has ended there
   * already.
   */
  async #writeClose(
    records: ModelTier,
    first: TierWrite,
    closing: NonNullable<TierPlace["closing"]>,
  ): Promise<void> {
    let write = first;
    // A close the tier did not take is not remembered here as an end: a retry asks the tier.
    const fail = (error: ServerError) => {
      this.#tierWriteFailures++;
      this.#recentEnds.forget(idKey(write.id));
      this.#warn(
        `the end of ${this.#describe(write.id)} was not written to the state store: ${error.message}`,
      );
      closing.reject(error);
    };
    try {
      for (let tries = 1; ; tries++) {
        const [result] = await records.write([write]);
        if (result?.kind !== "conflict") return closing.resolve();
        const current = result.current;
        // Ended already, or started again elsewhere: the life this close meant is over.
        if (current === undefined || current.ended !== undefined || current.life !== first.life) {
          return closing.resolve();
        }
        if (tries > MAX_STEP_RETRIES) {
          return fail(
            unavailable(
              `${this.#describe(write.id)} was advanced by another replica while it was being closed, ${tries} times in a row; retry the close`,
              1,
            ),
          );
        }
        const body = decodeRecordBody(current.body, this.#describe(write.id));
        write = {
          ...write,
          expect: { version: current.version, life: current.life },
          life: current.life,
          body: encodeRecordBody({ ...body, state: undefined }),
        };
      }
    } catch (error) {
      fail(this.#tierError(write.id, "closing", error, false));
    }
  }

  /**
   * The tier lost its data: the sequences this replica held and had written are gone, and
   * so is the id counter its reserved blocks were counted from.
   */
  #dataLost(atMs: number): void {
    this.#ids?.drop();
    const lost = [...this.#all].filter((s) => s.tier?.version !== undefined && !s.tier.ended);
    if (lost.length === 0) return;
    const names = lost.map((s) => formatSequenceId(s.id));
    this.#warn(
      `the state store at ${this.#tier!.tier.location} lost its data at ${new Date(atMs).toISOString()} (it restarted without persistence): ` +
        `${lost.length} sequence(s) of model '${this.#config.name}' lost their state and end (reason state_lost): ${names.join(", ")}`,
    );
    for (const sequence of lost) {
      sequence.tier!.ended = true;
      this.#endNow(sequence, "state_lost", this.#lostError(sequence.id));
    }
  }

  /**
   * Shutdown with a tier: no new sequence starts; the requests accepted run and their
   * state is written; then every sequence is let go of, to go on on another replica.
   */
  async #handOver(deadlineMs: number): Promise<void> {
    await this.#untilSettled(deadlineMs);
    for (const sequence of [...this.#all]) {
      if (sequence.tier !== undefined) sequence.tier.leaving = true;
      this.#endNow(sequence, "shutdown", this.#leavingError(sequence.id));
    }
    if (this.#idleTimer !== undefined) clearTimeout(this.#idleTimer);
    await this.#untilSettled(Number.POSITIVE_INFINITY);
    this.#stopListening?.();
    await this.#tier!.tier.flush();
  }

  #untilSettled(deadlineMs: number): Promise<void> {
    if (this.#pending === 0) return Promise.resolve();
    return new Promise<void>((resolve) => {
      const timer = Number.isFinite(deadlineMs)
        ? setTimeout(resolve, timerDelay(deadlineMs - Date.now()))
        : undefined;
      this.#settleWaiters.push(() => {
        clearTimeout(timer);
        resolve();
      });
    });
  }

  // ---- SequenceAdmin ----

  list(): SequenceInfo[] {
    const now = Date.now();
    return [...this.#all].map((s) => ({
      id: s.id,
      status: s.status,
      ageMs: now - s.createdMs,
      idleMs: now - s.lastArrivalMs,
      // The steps applied: a step that failed left the state as it was.
      steps: s.applied,
      queued: s.queue.length,
      stateBytes: this.#model.store.bytesOf(s.key),
      instance: s.holder?.instanceName,
      slot: s.holder === undefined ? undefined : s.slot,
      expiresAtMs: s.expiresAtMs,
    }));
  }

  summary(): SequenceSummary {
    // Live = holding a slot. Counted from the sequences rather than from the FIFO: a life
    // that restarted a waiting id waits for a slot without being in the FIFO, and was
    // counted live while the listing showed it backlogged.
    let live = 0;
    for (const sequence of this.#all) if (sequence.holder !== undefined) live++;
    return {
      ...(this.#tier === undefined
        ? {}
        : {
            tier: {
              location: this.#tier.tier.location,
              loaded: this.#tierLoaded,
              conflicts: this.#tierConflicts,
              handedOver: this.#handedOver,
              writeFailures: this.#tierWriteFailures,
            },
          }),
      live,
      backlog: this.#all.size - live,
      stateBytes: this.#model.store.totalBytes,
      stateAllocatedBytes: this.#model.store.allocatedBytes,
      ended: { ...this.#ended },
    };
  }

  end(id: SequenceId, reason: SequenceEndReason = "forced"): boolean | Promise<boolean> {
    // Handing over, a stream's end (its client closed it, or left it) does not end the
    // sequence, as a cancelled request does not (#cancelled): the shutdown cuts every
    // stream, and no frontend can tell that cut from its client's own close, so the
    // sequence goes on on another replica. An operator's end still ends it.
    if (this.#handingOver && (reason === "end" || reason === "cancelled")) return false;
    const sequence = this.#live.get(idKey(id));
    if (sequence === undefined) {
      // Another replica may hold it: an operator's end reaches it through the tier.
      if (this.#tier === undefined || reason !== "forced") return false;
      const write: TierWrite = {
        id,
        mode: "force_end",
        life: "",
        body: encodeRecordBody({
          applied: 0,
          state: undefined,
          answers: [],
          createdMs: Date.now(),
          expiresAtMs: undefined,
          owner: undefined,
        }),
        endReason: reason,
        expiry: { kind: "never" },
      };
      return this.#tier.write([write]).then(
        ([result]) => result?.kind === "written",
        (error: unknown) => {
          throw this.#tierError(id, "ending", error, false);
        },
      );
    }
    const how = reason === "forced" ? "through the sequences API" : `(${reason})`;
    const place = sequence.tier;
    // With a tier, an operator's end is done when the tier holds it, as a close is.
    const written =
      place === undefined || reason !== "forced"
        ? true
        : new Promise<boolean>((resolve, reject) => {
            place.closing = { resolve: () => resolve(true), reject };
          });
    this.#endNow(
      sequence,
      reason,
      cancelled(`sequence ${formatSequenceId(id)} of model '${this.#config.name}' was ended ${how}`),
    );
    return written;
  }

  // ---- moving sequences to a reloaded version of the model ----

  /** Starts no more batches; resolves once none is running, so every state in the store is final. */
  async pause(): Promise<void> {
    await Promise.all(this.#instances.map((i) => i.pause()));
  }

  resume(): void {
    for (const instance of this.#instances) instance.resume();
  }

  /** The state tensors' names, datatypes and shapes: sequences move only between equal signatures. */
  get stateSignature(): string {
    return stateSignature(this.#sequencing);
  }

  /**
   * Takes every unfinished sequence out, with its state and its accepted requests, for
   * `adopt` on the batcher of a reloaded version (call while paused). Nothing ends: the
   * sequences leave uncounted and the requests keep their promises.
   */
  export(): SequenceTransfer {
    const leaving = [...this.#all];
    const sequences: TransferredSequence[] = leaving.map((s) => ({
      id: s.id,
      live: this.#live.get(idKey(s.id)) === s,
      endReason: s.endReason,
      // A copy: the store may hand out views of memory that freeing the row lets it reuse.
      state: copyState(this.#model.store.get(s.key)),
      requests: s.queue.drain(),
      steps: s.steps,
      applied: s.applied,
      answers: s.answers,
      createdMs: s.createdMs,
      lastArrivalMs: s.lastArrivalMs,
      expiresAtMs: s.expiresAtMs,
      owner: s.owner,
      backlogDeadlineMs: s.holder === undefined ? s.backlogDeadlineMs : undefined,
      ...(this.#tier === undefined || s.tier === undefined
        ? {}
        : {
            tier: {
              source: s.tier.movingFrom ?? this.#tier,
              life: s.tier.life,
              version: s.tier.version,
              ended: s.tier.ended,
            },
          }),
    }));
    // A close waiting for its sequence to be idle is answered now: the new version ends
    // the sequence and writes the end to the tier as any end, without confirming it.
    for (const s of leaving) s.tier?.closing?.resolve();
    // Out of every table first, so freeing their slots hands none to another leaver.
    this.#all.clear();
    this.#live.clear();
    this.#ending.clear();
    this.#byArrival.clear();
    this.#backlog.drain();
    this.#copyChecks.clear();
    for (const timers of [
      this.#backlogTimers,
      this.#expiryTimers,
      this.#sessionCheckTimers,
      this.#firstRequestTimers,
    ]) {
      for (const timer of timers.values()) clearTimeout(timer);
      timers.clear();
    }
    for (const sequence of leaving) {
      this.#model.store.delete(sequence.key);
      sequence.successor = undefined;
      sequence.holder?.release(sequence, sequence.slot!);
      sequence.holder = undefined;
    }
    this.#notifyIdle();
    return { signature: this.stateSignature, sequences, ended: { ...this.#ended } };
  }

  /**
   * Takes over sequences exported by the previous version of the model (whose state
   * signature the caller checked): each gets a slot (or a place in the backlog) with its
   * state, and its requests are checked against this version's config and queued in order.
   * A sequence that finds no room ends (reason "reloaded"), as does one whose id a live
   * sequence already holds here, and a request that this version refuses. What it took
   * over and what ended: the handover's log must not call an ended sequence moved.
   */
  adopt(transfer: SequenceTransfer): HandoverResult {
    for (const reason of SEQUENCE_END_REASONS) this.#ended[reason] += transfer.ended[reason];
    let moved = 0;
    const ended = new Map<string, number>();
    for (const moving of transfer.sequences) {
      const why = this.#adoptOne(moving);
      if (why === undefined) moved++;
      else ended.set(why, (ended.get(why) ?? 0) + 1);
    }
    // The moved sequences keep their idle clocks: the reaper's list is in arrival order again.
    const byArrival = [...this.#byArrival.keys()].sort((a, b) => a.lastArrivalMs - b.lastArrivalMs);
    this.#byArrival.clear();
    for (const sequence of byArrival) this.#byArrival.set(sequence, true);
    clearTimeout(this.#idleTimer);
    this.#idleTimer = undefined;
    this.#armIdleTimer();
    return { moved, ended: [...ended].map(([reason, count]) => ({ count, reason })) };
  }

  /** Takes one sequence over; why it ended instead, if it did. */
  #adoptOne(moving: TransferredSequence): string | undefined {
    if (moving.live && this.#live.has(idKey(moving.id))) {
      // Two versions folded into one, each with a live sequence of this id: the one that
      // came first keeps it, and this one ends as the reload's, its requests refused.
      const why = `the reloaded model '${this.#config.name}' already holds a live sequence with its id, moved from another version`;
      const refusal = cancelled(`sequence ${formatSequenceId(moving.id)} ended: ${why}`);
      for (const request of moving.requests) request.reject(refusal);
      this.#ended.reloaded++;
      return why;
    }
    const sequence = new Sequence(moving.id, moving.createdMs, moving.owner);
    sequence.steps = moving.steps;
    sequence.applied = moving.applied ?? 0;
    sequence.answers = moving.answers;
    sequence.tier = this.#newPlace();
    if (sequence.tier !== undefined && moving.tier !== undefined) {
      // The copy keeps its place in the tier, and reads its record again before its next
      // step (another replica may have advanced it meanwhile). Moved to a new version, it
      // moves its record into this version's records then (#moveRecord): until then the
      // old version's record is the sequence, which a replica serving that version may
      // still advance; afterwards that record is fenced, saying where the sequence went.
      sequence.tier.life = moving.tier.life;
      sequence.tier.version = moving.tier.version;
      sequence.tier.ended = moving.tier.ended;
      sequence.tier.stale = moving.tier.version !== undefined;
      sequence.tier.verified = false;
      if (moving.tier.source.records !== this.#tier!.records && moving.tier.version !== undefined)
        sequence.tier.movingFrom = moving.tier.source;
    }
    sequence.endReason = moving.endReason;
    sequence.expiresAtMs = moving.expiresAtMs;
    try {
      this.#place(sequence);
    } catch (error) {
      const why = `the reloaded model '${this.#config.name}' has no room (${(error as Error).message})`;
      const refusal = cancelled(`sequence ${formatSequenceId(moving.id)} ended: ${why}`);
      for (const request of moving.requests) request.reject(refusal);
      this.#ended.reloaded++;
      return why;
    }
    if (sequence.status === "active" && moving.endReason !== undefined) sequence.status = "ending";
    if (moving.state !== undefined) this.#model.store.set(sequence.key, moving.state);
    this.#all.add(sequence);
    const key = idKey(moving.id);
    if (moving.live) this.#live.set(key, sequence);
    else if (moving.endReason === "end") this.#ending.set(key, sequence);
    for (const request of moving.requests) {
      try {
        request.revalidate(validateRequest(this.#config, request.request));
      } catch (error) {
        request.reject(error instanceof ServerError ? error : cancelled(String(error)));
        continue;
      }
      this.#accept(sequence, request, false);
    }
    if (sequence.endReason !== undefined && sequence.idle) {
      this.#finish(sequence);
      return;
    }
    if (moving.expiresAtMs !== undefined) {
      this.#armExpiry(sequence, moving.expiresAtMs);
      // Opened without a request and none since: its window for one goes on here.
      if (sequence.steps === 0 && moving.requests.length === 0) this.#armFirstRequest(sequence);
    }
    if (sequence.holder !== undefined) {
      this.#startIdleClock(sequence, moving.lastArrivalMs);
      sequence.holder.wake(sequence);
    } else if (moving.backlogDeadlineMs !== undefined) {
      // Still waiting for a slot: its START's timeout goes on counting from where it was.
      this.#armBacklogTimeout(sequence, Math.max(0, moving.backlogDeadlineMs - Date.now()) * 1000);
    }
  }

  /** Ends every unfinished sequence now: queued requests fail with `why`, running ones complete first. */
  endAll(reason: SequenceEndReason, why: string): void {
    for (const sequence of [...this.#all]) this.#endNow(sequence, reason, unavailable(why));
  }

  #forgetEnding(sequence: Sequence): void {
    const key = idKey(sequence.id);
    if (this.#ending.get(key) === sequence) this.#ending.delete(key);
  }

  checkId(id: SequenceId): void {
    this.#checkIdLength(id);
    checkCorrelationIdType(this.#config, id);
  }

  open(id: SequenceId, options: SequenceOpenOptions = {}): void | Promise<void> {
    return this.#open(id, options, false);
  }

  /** `reclaimed`: opened again after the tier said which copies held here are behind (see #admitAfterLook). */
  #open(id: SequenceId, options: SequenceOpenOptions, reclaimed: boolean): void | Promise<void> {
    const model = this.#config.name;
    this.checkId(id);
    if (this.#shuttingDown) {
      throw stopping(STOPPED_ACCEPTING);
    }
    const key = idKey(id);
    const existing = this.#live.get(key);
    if (existing !== undefined) {
      this.#checkOwner(existing, options.owner);
      if (!this.#pastExpiry(existing)) {
        throw new ServerError(
          "ALREADY_EXISTS",
          `sequence ${formatSequenceId(id)} of model '${model}' is already live`,
        );
      }
      this.#expire(existing);
    }
    const refusal = this.#noRoomForNew();
    if (refusal !== undefined) {
      if (this.#tier === undefined || reclaimed) throw refusal;
      return this.#openAfterLook(id, options, refusal);
    }
    const sequence = new Sequence(id, Date.now(), options.owner);
    sequence.expiresAtMs = options.expiresAtMs;
    this.#place(sequence);
    this.#all.add(sequence);
    this.#live.set(key, sequence);
    this.#recentEnds.forget(key);
    if (sequence.holder !== undefined) this.#startIdleClock(sequence);
    if (options.expiresAtMs !== undefined) {
      this.#armExpiry(sequence, options.expiresAtMs);
      this.#armFirstRequest(sequence);
    }
    const place = this.#newPlace();
    if (place === undefined) return;
    // Any replica may take the next request: the sequence exists in the tier before this resolves.
    sequence.tier = place;
    const write: TierWrite = {
      id,
      mode: "new",
      life: place.life,
      body: this.#body(sequence, 0, undefined, false),
      expiry: this.#expiry(sequence),
    };
    return this.#tier!.write([write]).then(
      ([result]) => {
        if (result?.kind === "written") place.version = result.version;
      },
      (error: unknown) => {
        const failure = this.#tierError(id, "opening", error, false);
        place.ended = true;
        this.#endNow(sequence, "forced", failure);
        throw failure;
      },
    );
  }

  /** A session that finds no room, opened again once stale copies are let go (as #admitAfterLook). */
  #openAfterLook(id: SequenceId, options: SequenceOpenOptions, refusal: ServerError): Promise<void> {
    if (!this.#roomToWaitForTier) throw refusal;
    this.#waitingForTier++;
    // Counted as a request pending: a stop waits for its answer before handing over.
    this.#pending++;
    return new Promise<void>((resolve, reject) => {
      this.#reclaimStaleCopies(() => {
        this.#pending--;
        this.#waitingForTier--;
        try {
          resolve(this.#open(id, options, true));
        } catch (error) {
          reject(error);
        } finally {
          this.#notifyIdle();
        }
      });
    });
  }

  close(id: SequenceId, caller?: SequenceCaller): boolean | Promise<boolean> {
    const key = idKey(id);
    const sequence = this.#live.get(key);
    if (sequence === undefined) {
      if (this.#tier === undefined || this.#ending.has(key)) return false;
      // Held by another replica (or by none, since one died): taken up here to be closed.
      return this.#tier.read(id).then(
        (record) => {
          if (record === undefined || record.ended !== undefined) return false;
          if (!this.#live.has(key)) this.#adoptFromTier(key, id, record, true);
          return this.close(id, caller);
        },
        (error: unknown) => {
          throw this.#tierError(id, "closing", error, false);
        },
      );
    }
    if (caller !== undefined) this.#checkOwner(sequence, caller.principal);
    sequence.endReason = "end";
    this.#releaseId(sequence);
    const place = sequence.tier;
    // With a tier, the close is done when the tier holds it (a copy here may be behind).
    const written =
      place === undefined
        ? true
        : new Promise<boolean>((resolve, reject) => {
            place.closing = { resolve: () => resolve(true), reject };
          });
    if (sequence.idle) this.#finish(sequence);
    return written;
  }

  withdraw(id: SequenceId): boolean {
    const sequence = this.#live.get(idKey(id));
    if (sequence === undefined || sequence.steps > 0 || !sequence.idle || sequence.endReason !== undefined)
      return false;
    sequence.withdrawn = true;
    // `forced` for a store's record of it, which another replica may have read: it ends there.
    this.#endNow(
      sequence,
      "forced",
      cancelled(
        `sequence ${formatSequenceId(id)} of model '${this.#config.name}' was withdrawn: its first request was refused`,
      ),
    );
    return true;
  }

  checkCaller(id: SequenceId, principal: string | undefined): void {
    const live = this.#live.get(idKey(id));
    if (live !== undefined) this.#checkOwner(live, principal);
  }

  /** Why the ids no longer live ended, oldest first, by sequenceKey (what lookup() answers from). */
  recentEnds(): IterableIterator<[string, RecentEnd]> {
    return this.#recentEnds.entries();
  }

  lookup(id: SequenceId): SequenceLookup {
    const key = idKey(id);
    const live = this.#live.get(key);
    if (live !== undefined) return { kind: "live", expiresAtMs: live.expiresAtMs };
    const end = this.#recentEnds.get(key);
    return end === undefined ? { kind: "unknown" } : { kind: "ended", ...end };
  }

  async locate(id: SequenceId): Promise<SequenceLookup> {
    const here = this.lookup(id);
    if (here.kind === "live" || this.#tier === undefined) return here;
    let record: TierRecord | undefined;
    try {
      record = await this.#tier.read(id);
    } catch (error) {
      throw this.#tierError(id, "looking up", error, false);
    }
    if (record === undefined) return here;
    if (record.ended !== undefined) {
      return { kind: "ended", reason: record.ended as SequenceEndReason, endedAtMs: record.writtenAtMs };
    }
    const body = decodeRecordBody(record.body, this.#describe(id));
    return { kind: "live", expiresAtMs: body.expiresAtMs };
  }
}
