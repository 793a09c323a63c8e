import { cancelled, type ServerError } from "../errors.ts";
import type { ResponseSink } from "../executor.ts";
import type { InferRequest, Parameters, ParameterValue } from "../infer.ts";
import type { ValidatedRequest } from "../request-validation.ts";
import type { RequestTimings } from "../statistics.ts";
import type { Tensor } from "../tensor.ts";
import { type QueueBudget, queuedBytesOf } from "./queue-budget.ts";

export interface RequestResult {
  readonly outputs: ReadonlyMap<string, Tensor>;
  readonly parameters: Parameters;
  readonly timings: RequestTimings;
}

const nowNs = (): number => performance.now() * 1e6;

/**
 * One request on its way through a scheduler: settles exactly once, records its own
 * timings, and reports cancellation by its client while it has not started to run.
 */
export class PendingRequest {
  readonly request: InferRequest;
  #validated: ValidatedRequest;
  readonly arrivalNs = nowNs();
  /** Parameters the scheduler adds to the response (e.g. a server-assigned `sequence_id`). */
  readonly responseParameters: Record<string, ParameterValue> = {};
  /** Decoupled models: where the request's responses go (the outcome then only completes it). */
  responses: ResponseSink | undefined;
  /** Set when the request is handed to an executor; after that it can no longer be cancelled. */
  dispatchNs = 0;
  /** When its wait in a queue with a timeout is over (Triton's queue policy); 0: never. */
  queueDeadlineNs = 0;
  readonly promise: Promise<RequestResult>;
  #resolve!: (result: RequestResult) => void;
  #reject!: (error: ServerError) => void;
  #settled = false;
  #onAbort: (() => void) | undefined;
  #gate: ((deliver: () => void) => void) | undefined;
  /** The budget holding the request's input bytes while it waits to run, and how many. */
  #queueBudget: QueueBudget | undefined;
  #queuedBytes = 0;

  constructor(request: InferRequest, validated: ValidatedRequest) {
    this.request = request;
    this.#validated = validated;
    this.promise = new Promise<RequestResult>((resolve, reject) => {
      this.#resolve = resolve;
      this.#reject = reject;
    });
  }

  /** The request checked against the model that runs it. */
  get validated(): ValidatedRequest {
    return this.#validated;
  }

  /** The request checked again against another model (a reloaded version that takes it over). */
  revalidate(validated: ValidatedRequest): void {
    this.#validated = validated;
  }

  get settled(): boolean {
    return this.#settled;
  }

  get dispatched(): boolean {
    return this.dispatchNs !== 0;
  }

  /**
   * Calls `handler` if the client aborts before dispatch (once; never after settling). A
   * later call replaces the handler: the request has moved to another scheduler.
   */
  onCancel(handler: (request: PendingRequest) => void): void {
    const signal = this.request.signal;
    if (signal === undefined) return;
    if (this.#onAbort !== undefined) signal.removeEventListener("abort", this.#onAbort);
    if (signal.aborted) {
      queueMicrotask(() => {
        if (!this.#settled && !this.dispatched) handler(this);
      });
      return;
    }
    this.#onAbort = () => {
      if (!this.#settled && !this.dispatched) handler(this);
    };
    signal.addEventListener("abort", this.#onAbort, { once: true });
  }

  /** Delivers the outcome through `gate` (used to release responses in arrival order). */
  deliverThrough(gate: ((deliver: () => void) => void) | undefined): void {
    this.#gate = gate;
  }

  /**
   * Gives up the request's place in the delivery order: it goes back to wait for a run,
   * and takes a new place when it leaves again. The answers behind it go out meanwhile.
   */
  leaveGate(): void {
    const gate = this.#gate;
    this.#gate = undefined;
    gate?.(() => {});
  }

  /** Whether the answer goes out through a gate (it has a place in a delivery order). */
  get gated(): boolean {
    return this.#gate !== undefined;
  }

  /**
   * For a request of a sequence: the server's budget of requests waiting for a slot (a
   * START in the backlog, and the steps queued behind it), and the model that names it in
   * a refusal (queue-budget.ts); its scheduler holds the bytes there if it must wait.
   */
  backlogBudget: { readonly budget: QueueBudget; readonly model: string } | undefined;

  /**
   * The request waits for its sequence's slot: its input bytes are held in its
   * backlogBudget until it is dispatched or settles, whichever comes first; throws (holding
   * nothing) when they do not fit. `sequence`: for a step behind the START, its sequence
   * as messages write it (undefined for the START); `withdraws`: refused, the step
   * withdraws that sequence (its START has not run).
   */
  holdWhileWaiting(sequence?: string, withdraws = false): void {
    const to = this.backlogBudget;
    if (to === undefined || this.#queueBudget !== undefined) return;
    const bytes = queuedBytesOf(this.#validated.inputs);
    to.budget.take(bytes, to.model, this.request.id, sequence, withdraws);
    this.#queueBudget = to.budget;
    this.#queuedBytes = bytes;
    this.request.sequence?.onWaitingForSlot?.(true);
  }

  /**
   * Gives the bytes held by holdWhileWaiting back, once: on dispatch, on settling, or when
   * the scheduler refused the request. A request moved to another scheduler (a reload)
   * keeps them; one queued again after it ran (a step retried) does not take them again.
   */
  releaseQueuedBytes(): void {
    const budget = this.#queueBudget;
    if (budget === undefined) return;
    this.#queueBudget = undefined;
    budget.give(this.#queuedBytes);
    this.request.sequence?.onWaitingForSlot?.(false);
  }

  markDispatched(): void {
    this.dispatchNs = nowNs();
    this.releaseQueuedBytes();
  }

  resolve(result: RequestResult): void {
    if (this.#settle()) this.#deliver(() => this.#resolve(result));
  }

  reject(error: ServerError): void {
    if (this.#settle()) this.#deliver(() => this.#reject(error));
  }

  #deliver(deliver: () => void): void {
    if (this.#gate === undefined) deliver();
    else this.#gate(deliver);
  }

  cancel(message = "request cancelled by the client"): void {
    this.reject(cancelled(message));
  }

  /**
   * Queue time (in the scheduler, and with the instance before the run began: `waitNs`)
   * plus the compute split of the batch of `batchSize` rows it ran in.
   */
  timings(
    computeInputNs: number,
    computeInferNs: number,
    computeOutputNs: number,
    batchSize: number,
    waitNs = 0,
  ): RequestTimings {
    const end = nowNs();
    return {
      queueNs: (this.dispatchNs || end) - this.arrivalNs + waitNs,
      computeInputNs,
      computeInferNs,
      computeOutputNs,
      totalNs: end - this.arrivalNs,
      batchSize,
    };
  }

  #settle(): boolean {
    if (this.#settled) return false;
    this.#settled = true;
    this.releaseQueuedBytes();
    if (this.#onAbort !== undefined) this.request.signal?.removeEventListener("abort", this.#onAbort);
    return true;
  }
}

export { nowNs };
