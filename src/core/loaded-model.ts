import { markAdmitted } from "./admitted-failure.ts";
import { asServerError, cancelled, ServerError } from "./errors.ts";
import type { ModelExecutor } from "./executor.ts";
import type { InferRequest, InferResponse, NamedTensor, SequenceId } from "./infer.ts";
import type { SequenceAdmin, ServedModel, TensorMetadata } from "./model.ts";
import type { ModelConfig } from "./model-config.ts";
import type { Refusals } from "./refusals.ts";
import { validateRequest } from "./request-validation.ts";
import { RequestResponses } from "./response-statistics.ts";
import { type InferResponseStream, ResponseChannel, singleResponseStream } from "./response-stream.ts";
import type { BatchObserver } from "./scheduler/batch-observer.ts";
import { DynamicBatcher } from "./scheduler/dynamic-batcher.ts";
import { nowNs, PendingRequest, type RequestResult } from "./scheduler/pending-request.ts";
import type { QueueBudget } from "./scheduler/queue-budget.ts";
import type { RequestObserver } from "./scheduler/request-observer.ts";
import type { DrainReason, Scheduler } from "./scheduler/scheduler.ts";
import type { RecentEnd } from "./sequence/recent-ends.ts";
import { SequenceBatcher } from "./sequence/sequence-batcher.ts";
import type { ModelTier } from "./sequence/sequence-tier.ts";
import type { HandoverEnd, HandoverResult } from "./sequence/sequence-transfer.ts";
import type { StateBudget } from "./sequence/state-budget.ts";
import type { StateStore } from "./sequence/state-store.ts";
import {
  type CounterTotals,
  counterTotals,
  ModelStatistics,
  type ModelStatisticsSnapshot,
} from "./statistics.ts";
import type { Tensor } from "./tensor.ts";

// A loaded model version: its frozen config, its instances, and the scheduler the config
// asks for. This is what the frontends call `infer` on.

export interface LoadedModelOptions {
  readonly config: ModelConfig;
  readonly version: string;
  readonly executors: readonly ModelExecutor[];
  readonly store?: StateStore;
  readonly warn?: (message: string) => void;
  /** Logs routine sequence ends (idle timeouts). */
  readonly info?: (message: string) => void;
  /** The sequence batcher's window for a first request (SequenceBatcherOptions), for tests. */
  readonly firstRequestWindowMs?: number;
  /** Told about every batch of a sequence model (the model runner's log). */
  readonly observer?: BatchObserver;
  /** Told about every request when it is answered (latency metrics, tracing). */
  readonly requestObserver?: RequestObserver | undefined;
  /** A sequence model's tier shared with other replicas (sequence-tier.ts). */
  readonly tier?: ModelTier;
  /** Longest string sequence id, in UTF-8 bytes; undefined = no limit. */
  readonly maxSequenceIdBytes?: number;
  /** Where refusals by a limit are counted. */
  readonly refusals?: Refusals;
  /** The server's budget of state bytes, shared by every model (--max-state-bytes). */
  readonly stateBudget?: StateBudget;
  /** The server's budget of bytes of STARTs waiting to run, shared by every model (--max-queued-start-bytes). */
  readonly queueBudget?: QueueBudget;
  /** The backend's check of a request's inputs (see OpenedModel.checkInputs). */
  readonly checkInputs?: (inputs: ReadonlyMap<string, Tensor>) => void;
  /** Class labels by output (see ServedModel.labels). */
  readonly labels?: ReadonlyMap<string, readonly string[]>;
  /** How long the version took to load, in seconds. */
  readonly loadSeconds?: number;
}

/** The request's sequence id, or the one the server assigned to its START. */
function sequenceIdOf(request: InferRequest, pending: PendingRequest | undefined): SequenceId | undefined {
  const assigned = pending?.responseParameters.sequence_id;
  if (typeof assigned === "bigint" || typeof assigned === "string") return assigned;
  return request.sequence?.id;
}

function tensorMetadata(config: ModelConfig): { inputs: TensorMetadata[]; outputs: TensorMetadata[] } {
  const batching = config.maxBatchSize > 0;
  return {
    inputs: config.inputs.map((i) => ({
      name: i.name,
      datatype: i.datatype,
      shape: batching && !i.shared ? [-1, ...i.dims] : [...i.dims],
    })),
    outputs: config.outputs.map((o) => ({
      name: o.name,
      datatype: o.datatype,
      shape: batching ? [-1, ...o.dims] : [...o.dims],
    })),
  };
}

export class LoadedModel implements ServedModel {
  readonly name: string;
  readonly version: string;
  readonly config: ModelConfig;
  readonly inputs: readonly TensorMetadata[];
  readonly outputs: readonly TensorMetadata[];
  readonly sequences: SequenceAdmin | undefined;
  readonly labels: ReadonlyMap<string, readonly string[]> | undefined;
  readonly loadSeconds: number | undefined;
  readonly #executors: readonly ModelExecutor[];
  readonly #scheduler: Scheduler;
  readonly #statistics: ModelStatistics;
  /** The counters of the loads this one replaced in place (carryCountersFrom). */
  #carriedCounters: CounterTotals | (() => CounterTotals) | undefined;
  #requestObserver: RequestObserver | undefined;
  readonly #checkInputs: ((inputs: ReadonlyMap<string, Tensor>) => void) | undefined;
  /** The server's budget of requests waiting for a slot, with this model's name for its refusals; made once, handed to every sequence request. */
  readonly #backlogBudget: { readonly budget: QueueBudget; readonly model: string } | undefined;
  readonly #tier: ModelTier | undefined;

  constructor(options: LoadedModelOptions) {
    const { config } = options;
    this.name = config.name;
    this.version = options.version;
    this.config = config;
    const metadata = tensorMetadata(config);
    this.inputs = metadata.inputs;
    this.outputs = metadata.outputs;
    this.#executors = options.executors;
    this.#checkInputs = options.checkInputs;
    this.#backlogBudget =
      options.queueBudget === undefined ? undefined : { budget: options.queueBudget, model: config.name };
    this.labels = options.labels;
    this.loadSeconds = options.loadSeconds;
    this.#statistics = new ModelStatistics(config.name, options.version);
    this.#requestObserver = options.requestObserver;
    this.#tier = options.tier;
    if (config.sequenceBatching !== undefined) {
      const batcher = new SequenceBatcher({
        config,
        executors: options.executors,
        statistics: this.#statistics,
        ...(options.store === undefined ? {} : { store: options.store }),
        ...(options.warn === undefined ? {} : { warn: options.warn }),
        ...(options.info === undefined ? {} : { info: options.info }),
        ...(options.firstRequestWindowMs === undefined
          ? {}
          : { firstRequestWindowMs: options.firstRequestWindowMs }),
        ...(options.observer === undefined ? {} : { observer: options.observer }),
        ...(options.tier === undefined ? {} : { tier: options.tier }),
        ...(options.maxSequenceIdBytes === undefined ? {} : { maxIdBytes: options.maxSequenceIdBytes }),
        ...(options.refusals === undefined ? {} : { refusals: options.refusals }),
        ...(options.stateBudget === undefined ? {} : { stateBudget: options.stateBudget }),
      });
      this.#scheduler = batcher;
      this.sequences = batcher;
    } else {
      this.#scheduler = new DynamicBatcher({
        config,
        executors: options.executors,
        statistics: this.#statistics,
      });
      this.sequences = undefined;
    }
    // Last: a load whose construction failed above never counts as served.
    this.#tier?.startServing();
  }

  get decoupled(): boolean {
    return this.config.decoupled === true;
  }

  infer(request: InferRequest): Promise<InferResponse> {
    return this.#infer(request, undefined);
  }

  /** `channel`: the stream that carries the answer, told of the request's way to the model. */
  async #infer(request: InferRequest, channel: ResponseChannel | undefined): Promise<InferResponse> {
    const startNs = nowNs();
    this.#requestObserver?.requestArrived?.(request);
    let pending: PendingRequest | undefined;
    let enqueued = false;
    let result: RequestResult;
    try {
      if (this.decoupled) {
        throw new ServerError(
          "UNSUPPORTED",
          `model '${this.name}' is decoupled (it may send several responses per request): use a streaming endpoint ` +
            "(gRPC ModelStreamInfer, a WebSocket stream, or /generate_stream; /generate takes a single response)",
        );
      }
      pending = new PendingRequest(request, this.#validate(request));
      channel?.follow(pending);
      this.#enqueue(pending);
      enqueued = true;
      result = await pending.promise;
    } catch (error) {
      throw this.#failed(request, startNs, pending, enqueued, error);
    }
    this.#succeeded(request, pending, result);
    const outputs: NamedTensor[] = [];
    for (const name of pending.validated.outputNames) {
      const tensor = result.outputs.get(name);
      if (tensor !== undefined) outputs.push({ name, ...tensor });
    }
    return {
      modelName: this.name,
      modelVersion: this.version,
      id: request.id,
      parameters: { ...result.parameters, ...pending.responseParameters },
      outputs,
    };
  }

  /**
   * The request's responses as the model produces them. A decoupled model's request runs
   * with a response channel; any other model's one answer is streamed as it is.
   */
  stream(request: InferRequest): InferResponseStream {
    if (!this.decoupled) {
      const single = new ResponseChannel(() => {});
      return singleResponseStream(this.#infer(request, single), single);
    }
    const startNs = nowNs();
    this.#requestObserver?.requestArrived?.(request);
    const controller = new AbortController();
    const signal =
      request.signal === undefined ? controller.signal : AbortSignal.any([request.signal, controller.signal]);
    let pending: PendingRequest | undefined;
    let firstResponseAtNs: number | undefined;
    const responses = new RequestResponses(this.#statistics.responses);
    const channel = new ResponseChannel(
      () => controller.abort(cancelled("the client stopped reading the request's responses")),
      (partial) => {
        const receivedNs = nowNs();
        firstResponseAtNs ??= receivedNs;
        const response = {
          modelName: this.name,
          modelVersion: this.version,
          id: request.id,
          parameters: { ...partial.parameters, ...pending?.responseParameters },
          outputs: [...partial.outputs].map(([name, tensor]) => ({ name, ...tensor })),
          final: partial.final,
        };
        responses.sent(pending?.dispatchNs ?? 0, receivedNs, nowNs(), partial.final);
        return response;
      },
    );
    try {
      pending = new PendingRequest({ ...request, signal }, this.#validate(request));
      pending.responses = channel;
      channel.follow(pending);
      channel.parameters = pending.responseParameters;
      this.#enqueue(pending);
    } catch (error) {
      // Refused before the scheduler took it: no failure of the model's (see #failed).
      channel.fail(this.#failed(request, startNs, pending, false, error));
      return channel;
    }
    const accepted = pending;
    // Removed when the request ends: a listener kept would keep the combined signal, and
    // all the request holds, for good (Node holds such signals while they are listened to).
    const onCancel = () => responses.cancelled(nowNs());
    signal.addEventListener("abort", onCancel, { once: true });
    const ended = (failed: boolean) => {
      signal.removeEventListener("abort", onCancel);
      responses.ended(accepted.dispatchNs, nowNs(), failed);
    };
    accepted.promise.then(
      (result) => {
        ended(false);
        const firstNs = firstResponseAtNs === undefined ? undefined : firstResponseAtNs - accepted.arrivalNs;
        this.#succeeded(request, accepted, result, { firstResponseNs: firstNs });
        channel.finish();
      },
      (error: unknown) => {
        ended(true);
        channel.fail(this.#failed(request, startNs, accepted, true, error));
      },
    );
    return channel;
  }

  /**
   * Hands `pending` to the scheduler; a request of a sequence goes with the server's budget
   * of requests waiting for a slot, which holds its bytes if it must wait (queue-budget.ts);
   * they come back if the scheduler refuses it.
   */
  #enqueue(pending: PendingRequest): void {
    if (pending.request.sequence !== undefined) pending.backlogBudget = this.#backlogBudget;
    try {
      this.#scheduler.enqueue(pending);
    } catch (error) {
      pending.releaseQueuedBytes();
      throw error;
    }
  }

  /** Tells the statistics and the request observer that an accepted request was answered. */
  #succeeded(
    request: InferRequest,
    pending: PendingRequest,
    result: RequestResult,
    /** For a request of a decoupled model: when its first response went, if it sent any. */
    streamed?: { readonly firstResponseNs: number | undefined },
  ): void {
    this.#statistics.recordSuccess(result.timings, pending.validated.rows);
    this.#requestObserver?.requestDone({
      request,
      arrivalNs: pending.arrivalNs,
      totalNs: result.timings.totalNs,
      sequenceId: sequenceIdOf(request, pending),
      timings: result.timings,
      outputs: result.outputs,
      ...(streamed === undefined ? {} : { streamed: true }),
      ...(streamed?.firstResponseNs === undefined ? {} : { firstResponseNs: streamed.firstResponseNs }),
    });
  }

  /**
   * Tells the statistics and the request observer that a request failed, and returns its
   * error. As Triton, a request refused before the scheduler took it (a malformed one, a
   * full queue, a step of a sequence that has not started) is no failure of the model's.
   */
  #failed(
    request: InferRequest,
    startNs: number,
    pending: PendingRequest | undefined,
    enqueued: boolean,
    error: unknown,
  ): ServerError {
    const failure = asServerError(error);
    const totalNs = nowNs() - startNs;
    if (enqueued) {
      this.#statistics.recordFailure(totalNs);
      markAdmitted(failure);
    }
    this.#requestObserver?.requestDone({
      request,
      arrivalNs: startNs,
      totalNs,
      sequenceId: sequenceIdOf(request, pending),
      error: failure,
      ...(enqueued ? {} : { refused: true as const }),
      ...(pending?.dispatched === true ? { dispatched: true as const } : {}),
    });
    return failure;
  }

  #validate(request: InferRequest): ReturnType<typeof validateRequest> {
    const validated = validateRequest(this.config, request);
    this.#checkInputs?.(validated.inputs);
    return validated;
  }

  statistics(): ModelStatisticsSnapshot {
    return this.#statistics.snapshot();
  }

  counterTotals(): CounterTotals {
    const carried = this.#carriedCounters;
    return counterTotals(this.#statistics.snapshot(), typeof carried === "function" ? carried() : carried);
  }

  /**
   * This load replaces `previous` in place: its counters go on from `previous`'s totals,
   * read as they are until `previous` has finished what it was running (it may still
   * answer requests taken before the switch), then kept as they ended.
   */
  carryCountersFrom(previous: LoadedModel, finished: Promise<unknown>): void {
    this.#carriedCounters = () => previous.counterTotals();
    void finished.then(() => {
      this.#carriedCounters = previous.counterTotals();
    });
  }

  /** Requests accepted and not yet answered. */
  get pending(): number {
    return this.#scheduler.pending;
  }

  get running(): number {
    return this.#scheduler.running;
  }

  /** Refuses new sequences from now on; accepted work and live sequences go on. */
  beginShutdown(): void {
    this.#scheduler.beginShutdown();
  }

  /**
   * Lets accepted work and live sequences finish until `deadlineMs`, then ends what is
   * left with `reason` (default "shutdown").
   */
  drain(deadlineMs: number, reason?: DrainReason): Promise<void> {
    this.#scheduler.beginShutdown();
    return this.#scheduler.drain(deadlineMs, reason);
  }

  /** Frees the instances (after drain). */
  async close(): Promise<void> {
    this.#tier?.stopServing();
    const observer = this.#requestObserver;
    this.#requestObserver = undefined;
    observer?.close?.();
    if (this.#scheduler instanceof SequenceBatcher) this.#scheduler.leaveStateBudget();
    await Promise.all(this.#executors.map((e) => e.close()));
  }

  async unload(deadlineMs: number, reason: DrainReason = "unloaded"): Promise<void> {
    // The repository no longer sends this load requests: from now, a version of the model
    // still served here may take over the sequences another replica began in this one.
    this.#tier?.stopServing();
    await this.drain(deadlineMs, reason);
    await this.close();
  }

  /** Why its sequences no longer live ended, oldest first, by sequenceKey: none without sequence batching. */
  sequenceEnds(): Iterable<[string, RecentEnd]> {
    return this.#scheduler instanceof SequenceBatcher ? this.#scheduler.recentEnds() : [];
  }

  // ---- reloads that keep live sequences ----

  /**
   * Before a handover: no new sequence batch starts, and the promise resolves once the
   * running ones have finished, so every sequence's state is final. Requests keep arriving
   * and queue. No-op for a model without sequences.
   */
  quiesce(): Promise<void> {
    return this.#scheduler instanceof SequenceBatcher ? this.#scheduler.pause() : Promise.resolve();
  }

  /** Lets a quiesced model run batches again (what a handover left it, if anything). */
  resume(): void {
    if (this.#scheduler instanceof SequenceBatcher) this.#scheduler.resume();
  }

  /**
   * Moves this (quiesced) version's unfinished sequences to `successor`, a newly loaded
   * version of the same model that is not serving yet: with their state and their queued
   * requests, when the state signature (state names, datatypes, shapes) is the same;
   * otherwise they end now with reason "reloaded". Synchronous, so the caller can make
   * `successor` the one that serves in the same turn, before any request can miss it.
   */
  moveSequencesTo(successor: LoadedModel): HandoverResult {
    const from = this.#scheduler;
    if (!(from instanceof SequenceBatcher)) return { moved: 0, ended: [] };
    const to = successor.#scheduler;
    let reason = "";
    if (!(to instanceof SequenceBatcher))
      reason = "the reloaded model is no longer served with sequence batching";
    else if (to.stateSignature !== from.stateSignature) {
      reason = `its state changed from [${from.stateSignature}] to [${to.stateSignature}]`;
    }
    const ended: HandoverEnd[] = [];
    if (reason !== "") {
      const count = from.list().length;
      // Quiesced, so nothing is running: every sequence finishes here and now.
      from.endAll("reloaded", `model '${this.name}' was reloaded and ${reason}`);
      if (count > 0) ended.push({ count, reason });
    }
    // What is left moves (nothing, when the state did not fit); the ends counted so far
    // go along, so the sequences API of the model goes on counting across the reload.
    const transfer = from.export();
    if (!(to instanceof SequenceBatcher)) return { moved: 0, ended };
    // The new version may take fewer over than were handed to it (fewer places, an id
    // taken by a sequence moved from another version): those end there, and say why.
    const adopted = to.adopt(transfer);
    return { moved: adopted.moved, ended: [...ended, ...adopted.ended] };
  }
}
