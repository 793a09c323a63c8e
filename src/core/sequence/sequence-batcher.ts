import { cancelled, invalidArg, ServerError, unavailable } from "../errors.ts";
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
import type { ModelConfig, SequenceBatchingConfig } from "../model-config.ts";
import type { Refusals } from "../refusals.ts";
import { validateRequest } from "../request-validation.ts";
import type { BatchObserver } from "../scheduler/batch-observer.ts";
import { OrderedRelease } from "../scheduler/ordered-release.ts";
import type { PendingRequest } from "../scheduler/pending-request.ts";
import { Deque } from "../scheduler/request-queue.ts";
import type { DrainReason, Scheduler } from "../scheduler/scheduler.ts";
import type { ModelStatistics } from "../statistics.ts";
import { cloneTensor, type NumericTensor } from "../tensor.ts";
import { checkCorrelationIdType } from "./control-tensors.ts";
import { DirectInstance } from "./direct-instance.ts";
import { initialStateTensor } from "./initial-state.ts";
import { OldestInstance } from "./oldest-instance.ts";
import { RecentEnds } from "./recent-ends.ts";
import { Sequence } from "./sequence.ts";
import type { SequenceModel } from "./sequence-batch-execution.ts";
import type { SequenceInstance, SequenceOwner } from "./sequence-instance.ts";
import { formatSequenceId } from "./sequence-parameters.ts";
import { type SequenceTransfer, stateSignature, type TransferredSequence } from "./sequence-transfer.ts";
import { isSerializedValue, type SequenceState, type StateEntry, type StateStore } from "./state-store.ts";
import { fixedStateLayouts, stateStoreForModel } from "./state-store-for-model.ts";

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
  /** Logs sequence ends that clients may wonder about (restarts, timeouts). */
  readonly warn?: (message: string) => void;
  /** Told about every batch (the model runner's log). */
  readonly observer?: BatchObserver;
  /** Longest string id, in UTF-8 bytes (a sequence keeps its id for its whole life). */
  readonly maxIdBytes?: number;
  /** Where refusals by a limit are counted. */
  readonly refusals?: Refusals;
}

const idKey = (id: SequenceId): string => (typeof id === "bigint" ? `u${id}` : `s${id}`);

/** Server-assigned ids start high in the uint64 range, away from ids clients usually pick. */
const FIRST_ASSIGNED_ID = 1n << 62n;

/** setTimeout's longest delay; a later expiry re-arms its timer when this one fires. */
const MAX_TIMER_MS = 2 ** 31 - 1;

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

export class SequenceBatcher implements Scheduler, SequenceAdmin, SequenceOwner {
  readonly #config: ModelConfig;
  readonly #sequencing: SequenceBatchingConfig;
  readonly #model: SequenceModel;
  readonly #instances: SequenceInstance[];
  readonly #warn: (message: string) => void;
  /** Ids in use, each owned by the live sequence that answers to it. */
  readonly #live = new Map<string, Sequence>();
  /** Every sequence not yet finished (live, backlogged, or ending after its id was released). */
  readonly #all = new Set<Sequence>();
  readonly #backlog = new Deque<Sequence>();
  readonly #backlogTimers = new Map<Sequence, NodeJS.Timeout>();
  readonly #expiryTimers = new Map<Sequence, NodeJS.Timeout>();
  /** Why ids that are no longer live ended, for lookup(). */
  readonly #recentEnds = new RecentEnds();
  /** Live sequences by last arrival, oldest first (re-inserted on each arrival). */
  readonly #byArrival = new Map<Sequence, true>();
  readonly #idleMs: number | undefined;
  #idleTimer: NodeJS.Timeout | undefined;
  readonly #ended: Record<SequenceEndReason, number>;
  readonly #ordering: OrderedRelease | undefined;
  /** Ids whose END was accepted and whose sequence has not finished yet. */
  readonly #ending = new Map<string, Sequence>();
  /** Live sequences allowed at once (max_candidate_sequence_use_ratio of the slots). */
  readonly #maxLive: number;
  readonly #maxIdBytes: number;
  readonly #refusals: Refusals | undefined;
  #nextAssignedId = FIRST_ASSIGNED_ID;
  #pending = 0;
  #shuttingDown = false;
  #idleWaiters: (() => void)[] = [];

  constructor(options: SequenceBatcherOptions) {
    const { config } = options;
    this.#config = config;
    this.#sequencing = config.sequenceBatching!;
    this.#warn = options.warn ?? (() => {});
    this.#maxIdBytes = options.maxIdBytes ?? Number.POSITIVE_INFINITY;
    this.#refusals = options.refusals;
    const initialStates = new Map<string, NumericTensor>();
    for (const state of this.#sequencing.states)
      initialStates.set(state.inputName, initialStateTensor(state));
    const layouts = fixedStateLayouts(config, initialStates);
    const strategy = this.#sequencing.strategy;
    const perInstance =
      strategy.kind === "direct" ? Math.max(1, config.maxBatchSize) : strategy.maxCandidateSequences;
    const slots = perInstance * options.executors.length;
    this.#model = {
      config,
      statistics: options.statistics,
      store: options.store ?? stateStoreForModel(layouts, config, slots),
      initialStates,
      fixedStateShapes: layouts !== undefined,
      ...(options.observer === undefined ? {} : { observer: options.observer }),
    };
    this.#instances = options.executors.map((executor) =>
      strategy.kind === "direct"
        ? new DirectInstance(this.#model, this, executor, strategy)
        : new OldestInstance(this.#model, this, executor, strategy),
    );
    const idleUs = this.#sequencing.maxSequenceIdleUs;
    this.#idleMs = idleUs === undefined ? undefined : idleUs / 1000;
    const ratio = this.#sequencing.maxSequenceUseRatio;
    this.#maxLive = ratio === undefined ? Number.POSITIVE_INFINITY : Math.max(1, Math.floor(ratio * slots));
    this.#ended = Object.fromEntries(SEQUENCE_END_REASONS.map((r) => [r, 0])) as Record<
      SequenceEndReason,
      number
    >;
    this.#ordering =
      strategy.kind === "oldest" && strategy.preserveOrdering ? new OrderedRelease() : undefined;
    for (const instance of this.#instances) {
      const executor = instance.executor;
      if (isRequestExecutor(executor)) executor.onReplaced((why) => this.#instanceFailed(instance, why));
    }
  }

  get pending(): number {
    return this.#pending;
  }

  /** Slots over all instances. */
  get capacity(): number {
    return this.#instances.reduce((n, i) => n + i.capacity, 0);
  }

  enqueue(pending: PendingRequest): void {
    const model = this.#config.name;
    const control = pending.request.sequence;
    const start = control?.start ?? false;
    const end = control?.end ?? false;
    const exclusive = control?.admission === "exclusive";
    let id = control?.id;
    if (id === undefined) {
      if (!start) {
        throw new ServerError(
          "INVALID_ARG",
          `inference request to model '${model}' must specify a non-zero or non-empty correlation ID`,
          { reason: "sequence_id_missing" },
        );
      }
      id = this.#assignId();
      pending.responseParameters.sequence_id = id;
    }
    this.#checkIdLength(id);
    checkCorrelationIdType(this.#config, id);
    if (this.#shuttingDown && start) {
      throw unavailable(`the server is shutting down: model '${model}' accepts no new sequences`);
    }
    const key = idKey(id);
    let existing = this.#live.get(key);
    if (existing !== undefined && this.#pastExpiry(existing)) {
      // Its timer has not fired yet: the expiry holds all the same.
      this.#expire(existing);
      if (!start) throw invalidArg(this.#expiredMessage(existing));
      existing = undefined;
    }
    if (!start && existing === undefined) throw this.#unknownId(id, exclusive);
    const principal = pending.request.principal;
    if (existing !== undefined) this.#checkOwner(existing, principal);
    if (start && exclusive) this.#checkExclusiveStart(id, existing);
    if (start && existing === undefined) this.#checkRoomForNew();

    let sequence: Sequence;
    if (start) {
      sequence = new Sequence(id, Date.now(), principal);
      if (existing !== undefined) {
        // The successor must be known (in #all) before #restart: when the old life is
        // idle, #restart finishes it at once, and #finish only hands the slot to (or
        // places) a successor it knows; otherwise the new life never got a slot and its
        // requests waited forever.
        this.#all.add(sequence);
        this.#restart(existing, sequence);
      } else {
        this.#place(sequence);
        this.#all.add(sequence);
      }
      this.#live.set(key, sequence);
      this.#recentEnds.forget(key);
    } else {
      sequence = existing!;
    }

    this.#accept(sequence, pending, control?.id === undefined);
    sequence.lastArrivalMs = Date.now();
    if (end) {
      sequence.endReason = "end";
      this.#releaseId(sequence);
      this.#ending.set(key, sequence);
    } else if (sequence.holder !== undefined && sequence.expiresAtMs === undefined) {
      this.#byArrival.delete(sequence);
      this.#byArrival.set(sequence, true);
      this.#armIdleTimer();
    }
    if (start && sequence.holder === undefined && control?.timeoutUs !== undefined) {
      this.#armBacklogTimeout(sequence, control.timeoutUs);
    }
    sequence.holder?.wake(sequence);
  }

  /** Takes `pending` into `sequence`'s queue: counted, ordered, cancellable. */
  #accept(sequence: Sequence, pending: PendingRequest, assigned: boolean): void {
    this.#pending++;
    pending.promise.then(
      () => this.#settled(),
      () => {
        this.#settled();
        // The failed START was the only place its server-assigned id would have been
        // told to the client: nobody can continue or end the sequence, so end it now.
        if (assigned && this.#all.has(sequence)) {
          this.#endNow(
            sequence,
            "forced",
            cancelled(`sequence ${formatSequenceId(sequence.id)} ended: its START request failed`),
          );
        }
      },
    );
    if (this.#ordering !== undefined) {
      const ticket = this.#ordering.issue();
      const ordering = this.#ordering;
      pending.deliverThrough((deliver) => ordering.complete(ticket, deliver));
    }
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
    if (sequence.owner === principal) return;
    throw new ServerError(
      "PERMISSION_DENIED",
      `sequence ${formatSequenceId(sequence.id)} of model '${this.#config.name}' belongs to another caller: only the API key that started it may continue or end it`,
    );
  }

  /** max_candidate_sequence_use_ratio: refuses a new sequence at once past that share of the slots. */
  #checkRoomForNew(): void {
    if (this.#live.size < this.#maxLive) return;
    throw new ServerError(
      "UNAVAILABLE",
      `model '${this.#config.name}' has ${this.#live.size} live sequences, as many as max_candidate_sequence_use_ratio ` +
        `${this.#sequencing.maxSequenceUseRatio} of its ${this.capacity} sequence slots allows; retry later`,
      { retryAfterSeconds: 1, reason: "sequence_limit" },
    );
  }

  #assignId(): bigint {
    for (;;) {
      const key = idKey(this.#nextAssignedId);
      if (!this.#live.has(key) && !this.#ending.has(key)) break;
      this.#nextAssignedId++;
    }
    return this.#nextAssignedId++;
  }

  /** A request without START for an id no live sequence answers to. */
  #unknownId(id: SequenceId, exclusive: boolean): ServerError {
    const sequence = `sequence ${formatSequenceId(id)}`;
    if (exclusive) {
      return new ServerError(
        "NOT_FOUND",
        `${sequence} of model '${this.#config.name}' does not exist: it never started, or it has ended`,
        { reason: "sequence_unknown" },
      );
    }
    return new ServerError(
      "INVALID_ARG",
      `inference request for ${sequence} to model '${this.#config.name}' must specify the START flag on the first request of the sequence`,
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

  /** A new sequence takes a free slot on the least-loaded instance, or joins the backlog. */
  #place(sequence: Sequence): void {
    let best: SequenceInstance | undefined;
    for (const instance of this.#instances)
      if (instance.free > 0 && (best === undefined || instance.free > best.free)) best = instance;
    if (best !== undefined) {
      best.bind(sequence);
      sequence.status = "active";
      return;
    }
    if (this.#backlog.length >= this.#sequencing.backlogLimit) {
      throw new ServerError(
        "UNAVAILABLE",
        `model '${this.#config.name}' has all ${this.capacity} sequence slots in use and its backlog of ${this.#sequencing.backlogLimit} sequences is full; retry later`,
        { retryAfterSeconds: 1, reason: "sequence_limit" },
      );
    }
    sequence.status = "backlogged";
    this.#backlog.push(sequence);
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
    if (old.idle) this.#finish(old);
  }

  /** The id no longer answers to `sequence`; it runs what it has queued, then finishes. */
  #releaseId(sequence: Sequence): void {
    const key = idKey(sequence.id);
    if (this.#live.get(key) === sequence) {
      this.#live.delete(key);
      this.#recentEnds.remember(key, { reason: sequence.endReason ?? "end", endedAtMs: Date.now() });
    }
    this.#byArrival.delete(sequence);
    if (sequence.status !== "backlogged") sequence.status = "ending";
  }

  // ---- SequenceOwner: called by instances ----

  afterStep(sequence: Sequence): void {
    if (sequence.endReason !== undefined && sequence.idle) this.#finish(sequence);
    else if (sequence.ready) sequence.holder!.wake(sequence);
  }

  settleWithoutRun(sequence: Sequence): boolean {
    if (this.#sequencing.inferEndRequests) return false;
    const head = sequence.queue.peek();
    if (head === undefined || sequence.running || head.request.sequence?.end !== true) return false;
    sequence.queue.shift();
    head.markDispatched();
    sequence.steps++;
    head.resolve({ outputs: new Map(), parameters: {}, timings: head.timings(0, 0, 0) });
    if (sequence.idle) this.#finish(sequence);
    return true;
  }

  slotFreed(instance: SequenceInstance): void {
    while (instance.free > 0) {
      const next = this.#backlog.shift();
      if (next === undefined) return;
      if (!this.#all.has(next)) continue;
      this.#clearBacklogTimeout(next);
      instance.bind(next);
      next.status = next.endReason === undefined ? "active" : "ending";
      this.#startIdleClock(next);
      instance.wake(next);
    }
  }

  // ---- ends ----

  /** The one place a sequence ends: frees its state and slot, counts the reason, serves the next. */
  #finish(sequence: Sequence, failQueued?: ServerError): void {
    if (!this.#all.delete(sequence)) return;
    const reason = sequence.endReason ?? "end";
    this.#ended[reason]++;
    this.#releaseId(sequence);
    this.#forgetEnding(sequence);
    for (const p of sequence.queue.drain())
      p.reject(failQueued ?? cancelled(`sequence ${formatSequenceId(sequence.id)} ended`));
    // Model code that keeps per-sequence data hears why, with the state, before it is freed.
    sequence.holder?.sequenceEnded(sequence, reason, this.#model.store.get(sequence.key));
    this.#model.store.delete(sequence.key);
    this.#clearBacklogTimeout(sequence);
    this.#clearExpiry(sequence);
    if (sequence.holder === undefined) this.#backlog.remove((s) => s === sequence);

    const successor = sequence.successor;
    const holder = sequence.holder;
    if (holder !== undefined && successor !== undefined && this.#all.has(successor)) {
      holder.handOver(sequence, successor);
      successor.status = successor.endReason === undefined ? "active" : "ending";
      this.#startIdleClock(successor);
      holder.wake(successor);
    } else {
      if (holder !== undefined) holder.release(sequence, sequence.slot!);
      if (successor !== undefined && this.#all.has(successor)) this.#placeSuccessor(successor);
    }
    sequence.holder = undefined;
    this.#notifyIdle();
  }

  #placeSuccessor(successor: Sequence): void {
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

  /** Ends `sequence` now: its queued requests fail with `error`; a running request completes first. */
  #endNow(sequence: Sequence, reason: SequenceEndReason, error: ServerError): void {
    sequence.endReason ??= reason;
    this.#releaseId(sequence);
    for (const p of sequence.queue.drain()) p.reject(error);
    if (sequence.idle) this.#finish(sequence);
  }

  /** A client gave up on a request that had not run: Triton ends the whole sequence. */
  #cancelled(sequence: Sequence, request: PendingRequest): void {
    sequence.queue.remove((p) => p === request);
    request.cancel();
    this.#endNow(
      sequence,
      "cancelled",
      cancelled(`sequence ${formatSequenceId(sequence.id)} ended: one of its requests was cancelled`),
    );
  }

  runningRequestCancelled(sequence: Sequence): void {
    this.#endNow(
      sequence,
      "cancelled",
      cancelled(`sequence ${formatSequenceId(sequence.id)} ended: one of its requests was cancelled`),
    );
  }

  /**
   * An instance whose model code kept per-sequence data was replaced (its thread died):
   * every sequence it held ends, its queued requests failing with the reason.
   */
  #instanceFailed(instance: SequenceInstance, why: string): void {
    for (const sequence of [...this.#all]) {
      if (sequence.holder !== instance) continue;
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
    sequence.backlogDeadlineMs = Date.now() + timeoutUs / 1000;
    const timer = setTimeout(() => {
      this.#backlogTimers.delete(sequence);
      if (sequence.holder !== undefined || !this.#all.has(sequence)) return;
      this.#endNow(
        sequence,
        "backlog_timeout",
        unavailable("timeout of the corresponding sequence has been expired"),
      );
    }, timeoutUs / 1000);
    timer.unref();
    this.#backlogTimers.set(sequence, timer);
  }

  #clearBacklogTimeout(sequence: Sequence): void {
    clearTimer(this.#backlogTimers, sequence);
  }

  /** The sequence ends at `atMs` (epoch ms), live or backlogged, whatever it is doing. */
  #armExpiry(sequence: Sequence, atMs: number): void {
    sequence.expiresAtMs = atMs;
    const timer = setTimeout(
      () => {
        this.#expiryTimers.delete(sequence);
        if (!this.#all.has(sequence)) return;
        if (this.#pastExpiry(sequence)) this.#expire(sequence);
        else this.#armExpiry(sequence, atMs);
      },
      Math.min(MAX_TIMER_MS, Math.max(0, atMs - Date.now())),
    );
    timer.unref();
    this.#expiryTimers.set(sequence, timer);
  }

  #clearExpiry(sequence: Sequence): void {
    clearTimer(this.#expiryTimers, sequence);
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
    const delay = Math.max(1, oldest.lastArrivalMs + this.#idleMs - Date.now());
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
  #startIdleClock(sequence: Sequence): void {
    // A sequence with an expiry lives until then, idle or not.
    if (sequence.endReason !== undefined || sequence.expiresAtMs !== undefined) return;
    sequence.lastArrivalMs = Date.now();
    this.#byArrival.delete(sequence);
    this.#byArrival.set(sequence, true);
    this.#armIdleTimer();
  }

  #reapIdle(): void {
    const now = Date.now();
    for (const sequence of this.#byArrival.keys()) {
      if (sequence.lastArrivalMs + this.#idleMs! > now) break;
      // Triton's reaper only frees slots: a backlogged sequence waits for its turn.
      if (sequence.holder === undefined) continue;
      sequence.endReason = "timeout";
      this.#releaseId(sequence);
      this.#warn(
        `sequence ${formatSequenceId(sequence.id)} of model '${this.#config.name}' ended after ${this.#idleMs} ms without a request`,
      );
      if (sequence.idle) this.#finish(sequence);
    }
  }

  // ---- Scheduler lifecycle ----

  #settled(): void {
    this.#pending--;
    this.#notifyIdle();
  }

  #notifyIdle(): void {
    if (this.#pending !== 0 || this.#all.size !== 0) return;
    for (const waiter of this.#idleWaiters.splice(0)) waiter();
  }

  beginShutdown(): void {
    this.#shuttingDown = true;
  }

  /**
   * Lets live sequences run to their end until `deadlineMs`, then ends the rest with
   * `reason` ("shutdown" when the server stops, "unloaded" when only the model goes).
   */
  async drain(deadlineMs: number, reason: DrainReason = "shutdown"): Promise<void> {
    this.#shuttingDown = true;
    if (this.#pending > 0 || this.#all.size > 0) {
      await new Promise<void>((resolve) => {
        // Referenced: whoever awaits the drain (a stopping server, an embedding program)
        // must still be running when it ends, even with nothing else left to wait for.
        const timer = setTimeout(resolve, Math.max(0, deadlineMs - Date.now()));
        this.#idleWaiters.push(() => {
          clearTimeout(timer);
          resolve();
        });
      });
    }
    const why =
      reason === "shutdown" ? "the server is shutting down" : `model '${this.#config.name}' was unloaded`;
    for (const sequence of [...this.#all]) this.#endNow(sequence, reason, unavailable(why));
    if (this.#idleTimer !== undefined) clearTimeout(this.#idleTimer);
    if (this.#pending > 0) await new Promise<void>((resolve) => this.#idleWaiters.push(resolve));
  }

  // ---- SequenceAdmin ----

  list(): SequenceInfo[] {
    const now = Date.now();
    return [...this.#all].map((s) => ({
      id: s.id,
      status: s.status,
      ageMs: now - s.createdMs,
      idleMs: now - s.lastArrivalMs,
      steps: s.steps,
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
      live,
      backlog: this.#all.size - live,
      stateBytes: this.#model.store.totalBytes,
      stateAllocatedBytes: this.#model.store.allocatedBytes,
      ended: { ...this.#ended },
    };
  }

  end(id: SequenceId, reason: SequenceEndReason = "forced"): boolean {
    const sequence = this.#live.get(idKey(id));
    if (sequence === undefined) return false;
    const how = reason === "forced" ? "through the sequences API" : `(${reason})`;
    this.#endNow(
      sequence,
      reason,
      cancelled(`sequence ${formatSequenceId(id)} of model '${this.#config.name}' was ended ${how}`),
    );
    return true;
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
      createdMs: s.createdMs,
      expiresAtMs: s.expiresAtMs,
      owner: s.owner,
    }));
    // Out of every table first, so freeing their slots hands none to another leaver.
    this.#all.clear();
    this.#live.clear();
    this.#ending.clear();
    this.#byArrival.clear();
    this.#backlog.drain();
    for (const timers of [this.#backlogTimers, this.#expiryTimers]) {
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
   * A sequence that finds no room ends (reason "reloaded"), as does a request that this
   * version refuses.
   */
  adopt(transfer: SequenceTransfer): void {
    for (const reason of SEQUENCE_END_REASONS) this.#ended[reason] += transfer.ended[reason];
    for (const moving of transfer.sequences) this.#adoptOne(moving);
  }

  #adoptOne(moving: TransferredSequence): void {
    const sequence = new Sequence(moving.id, moving.createdMs, moving.owner);
    sequence.steps = moving.steps;
    sequence.endReason = moving.endReason;
    sequence.expiresAtMs = moving.expiresAtMs;
    try {
      this.#place(sequence);
    } catch (error) {
      const refusal = cancelled(
        `sequence ${formatSequenceId(moving.id)} ended: the reloaded model '${this.#config.name}' has no room for it (${(error as Error).message})`,
      );
      for (const request of moving.requests) request.reject(refusal);
      this.#ended.reloaded++;
      return;
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
    if (moving.expiresAtMs !== undefined) this.#armExpiry(sequence, moving.expiresAtMs);
    if (sequence.holder !== undefined) {
      this.#startIdleClock(sequence);
      sequence.holder.wake(sequence);
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

  open(id: SequenceId, options: SequenceOpenOptions = {}): void {
    const model = this.#config.name;
    this.#checkIdLength(id);
    checkCorrelationIdType(this.#config, id);
    if (this.#shuttingDown) {
      throw unavailable(`the server is shutting down: model '${model}' accepts no new sequences`);
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
    this.#checkRoomForNew();
    const sequence = new Sequence(id, Date.now(), options.owner);
    sequence.expiresAtMs = options.expiresAtMs;
    this.#place(sequence);
    this.#all.add(sequence);
    this.#live.set(key, sequence);
    this.#recentEnds.forget(key);
    if (sequence.holder !== undefined) this.#startIdleClock(sequence);
    if (options.expiresAtMs !== undefined) this.#armExpiry(sequence, options.expiresAtMs);
  }

  close(id: SequenceId, caller?: SequenceCaller): boolean {
    const sequence = this.#live.get(idKey(id));
    if (sequence === undefined) return false;
    if (caller !== undefined) this.#checkOwner(sequence, caller.principal);
    sequence.endReason = "end";
    this.#releaseId(sequence);
    if (sequence.idle) this.#finish(sequence);
    return true;
  }

  lookup(id: SequenceId): SequenceLookup {
    const key = idKey(id);
    const live = this.#live.get(key);
    if (live !== undefined) return { kind: "live", expiresAtMs: live.expiresAtMs };
    const end = this.#recentEnds.get(key);
    return end === undefined ? { kind: "unknown" } : { kind: "ended", ...end };
  }
}
