import { stopping, unavailable } from "../errors.ts";
import { isRequestExecutor, type ModelExecutor } from "../executor.ts";
import type { ModelConfig } from "../model-config.ts";
import { requestLabel } from "../request-label.ts";
import type { ModelStatistics } from "../statistics.ts";
import { timerDelay } from "../timer-delay.ts";
import { runStatelessBatch } from "./batch-execution.ts";
import { OrderedRelease, takePlace } from "./ordered-release.ts";
import type { PendingRequest } from "./pending-request.ts";
import { PriorityQueue } from "./priority-queue.ts";
import { runRequestBatch } from "./request-batch-execution.ts";
import type { Scheduler } from "./scheduler.ts";
import { STOPPED_ACCEPTING } from "./stopped-accepting.ts";

// The scheduler of stateless models. Without `dynamic_batching` each request runs alone
// on the next free instance (Triton's default scheduler). With it, requests that can
// share a batch are concatenated up to max_batch_size: a batch leaves as soon as it
// reaches the largest preferred size, or when its oldest request has waited
// max_queue_delay_microseconds, or at once when no delay is configured. Instances take
// batches as they become free, so work spreads over all of them.
//
// An instance holds more than the batch it runs, so its worker starts the next run without
// waiting for this thread to hear of the last one: this thread answers and parses requests
// in stretches of several milliseconds, longer than a run. Measured (Silero VAD, batch 1,
// 64 clients): with one run at a time the worker sat idle two thirds of the time; with two
// it still idled 61 % and served 1.95k/s; with 16 it serves 3.0k/s and the server spends
// 25 % less CPU per request (fewer wake-ups of both threads).
//
// With batching, only a full batch queues behind a running one: a short one would split
// requests that would otherwise join the next batch when the running one ends. Without
// batching every request is a full batch of its own; queueing it in the worker rather than
// here only means that one cancelled meanwhile still runs (its answer is dropped).
//
// Requests wait in Triton's priority queue (priority-queue.ts): by priority level, each
// level under its queue policy. A request whose wait is over is refused with UNAVAILABLE
// "Request timeout expired" (REJECT), or served after its level's requests whose wait is
// not (DELAY), whenever the batcher looks at it, and at the latest when the wait of the
// earliest one ends (a timer), so a client does not wait on behind busy instances for an
// answer that is already decided.

/** Batches of several requests one instance holds at most: the one it runs and the next. */
const MAX_BATCHES_IN_FLIGHT = 2;
/** Single requests (a model that does not batch) one instance holds at most. */
export const MAX_REQUESTS_IN_FLIGHT = 16;

interface Instance {
  readonly executor: ModelExecutor;
  inFlight: number;
  /** Model code runs one batch at a time per instance (Triton's contract with a backend). */
  readonly maxInFlight: number;
}

export interface DynamicBatcherOptions {
  readonly config: ModelConfig;
  readonly executors: readonly ModelExecutor[];
  readonly statistics: ModelStatistics;
}

export class DynamicBatcher implements Scheduler {
  readonly #config: ModelConfig;
  readonly #statistics: ModelStatistics;
  readonly #instances: Instance[];
  readonly #queue: PriorityQueue;
  /** The earliest deadline in #queue (Infinity: none), and the timer that waits for it. */
  #nextDeadlineNs = Number.POSITIVE_INFINITY;
  #deadlineTimer: NodeJS.Timeout | undefined;
  readonly #merge: boolean;
  readonly #maxRows: number;
  readonly #targetRows: number;
  readonly #delayNs: number;
  readonly #ordering: OrderedRelease | undefined;
  #pending = 0;
  /** Requests in the batches handed to instances and not yet back. */
  #running = 0;
  #scheduled = false;
  #stopping = false;
  #timer: NodeJS.Timeout | undefined;
  #drained: (() => void) | undefined;

  constructor(options: DynamicBatcherOptions) {
    const { config } = options;
    this.#config = config;
    this.#statistics = options.statistics;
    const dynamic = config.dynamicBatching;
    this.#merge = dynamic !== undefined && config.maxBatchSize > 0;
    // A queue with a policy to enforce (a timeout, a size) keeps every request until its
    // run, as Triton's does (it stops prefetching then): a request waiting with an instance
    // would escape both.
    const policed = PriorityQueue.policed(dynamic);
    const pipelined = policed ? 1 : this.#merge ? MAX_BATCHES_IN_FLIGHT : MAX_REQUESTS_IN_FLIGHT;
    this.#instances = options.executors.map((executor) => ({
      executor,
      inFlight: 0,
      maxInFlight: isRequestExecutor(executor) ? 1 : pipelined,
    }));
    this.#maxRows = Math.max(1, config.maxBatchSize);
    const preferred = dynamic?.preferredBatchSizes ?? [];
    this.#targetRows = preferred.length > 0 ? Math.max(...preferred) : this.#maxRows;
    this.#delayNs = (dynamic?.maxQueueDelayUs ?? 0) * 1000;
    this.#queue = new PriorityQueue(dynamic);
    this.#ordering = dynamic?.preserveOrdering ? new OrderedRelease() : undefined;
  }

  get pending(): number {
    return this.#pending;
  }

  get running(): number {
    return this.#running;
  }

  enqueue(pending: PendingRequest): void {
    if (this.#stopping) throw stopping(`${requestLabel(pending.request.id)}${STOPPED_ACCEPTING}`);
    this.#queue.push(pending);
    this.#pending++;
    if (this.#ordering !== undefined) takePlace(this.#ordering, pending);
    pending.promise.then(
      () => this.#settled(),
      () => this.#settled(),
    );
    pending.onCancel((p) => {
      this.#queue.remove(p);
      p.cancel();
    });
    if (pending.queueDeadlineNs !== 0) {
      if (pending.queueDeadlineNs < this.#nextDeadlineNs) {
        this.#nextDeadlineNs = pending.queueDeadlineNs;
        this.#armDeadlineTimer();
      }
    }
    this.#schedule();
  }

  beginShutdown(): void {
    // Stateless requests already accepted finish; new ones are refused, as Triton's
    // stopped scheduler refuses them (a balancer sends them to another server).
    this.#stopping = true;
  }

  drain(deadlineMs: number): Promise<void> {
    if (this.#pending === 0) return Promise.resolve();
    return new Promise((resolve) => {
      const timer = setTimeout(
        () => {
          for (const p of this.#queue.drain()) {
            p.reject(stopping("the server is shutting down"));
          }
          resolve();
        },
        timerDelay(deadlineMs - Date.now()),
      );
      // Referenced, as the sequence batcher's: the drain's caller waits for it.
      this.#drained = () => {
        clearTimeout(timer);
        resolve();
      };
    });
  }

  #settled(): void {
    this.#pending--;
    if (this.#pending === 0) this.#drained?.();
  }

  /** Coalesces the requests that arrive in one turn of the event loop into one decision. */
  #schedule(): void {
    if (this.#scheduled) return;
    this.#scheduled = true;
    setImmediate(() => {
      this.#scheduled = false;
      this.#dispatch();
    });
  }

  /** The instance with the fewest batches in flight, if it can take another. */
  #leastBusy(): Instance | undefined {
    let best: Instance | undefined;
    for (const instance of this.#instances) {
      if (
        instance.inFlight < instance.maxInFlight &&
        (best === undefined || instance.inFlight < best.inFlight)
      ) {
        best = instance;
      }
    }
    return best;
  }

  #dispatch(): void {
    for (;;) {
      const instance = this.#leastBusy();
      if (instance === undefined) return;
      this.#expireWaits();
      const head = this.#queue.head();
      if (head === undefined) return;
      const behindRunning = instance.inFlight > 0;
      const batch = this.#merge ? this.#collect(head, behindRunning) : [this.#queue.shift()!];
      if (batch.length === 0) return;
      instance.inFlight++;
      this.#running += batch.length;
      const { executor } = instance;
      const requests = isRequestExecutor(executor);
      if (requests) {
        // Model code answers each request on its own time, a decoupled one maybe after
        // the instance took its next batch: each request counts until it is settled.
        const returned = (): void => {
          this.#running--;
        };
        for (const pending of batch) pending.promise.then(returned, returned);
      }
      const run = requests
        ? runRequestBatch(executor, this.#statistics, batch)
        : runStatelessBatch(this.#config, executor, this.#statistics, batch);
      run.finally(() => {
        instance.inFlight--;
        if (!requests) this.#running -= batch.length;
        this.#schedule();
      });
    }
  }

  /**
   * Applies timeout_action to every queued request whose wait is over, once the earliest
   * deadline has passed (otherwise one look at the clock per dispatch). A refusal is
   * answered at once, as Triton answers it: not in its place in preserve_ordering's order.
   */
  #expireWaits(): void {
    if (this.#nextDeadlineNs === Number.POSITIVE_INFINITY) return;
    const now = performance.now() * 1e6;
    if (now < this.#nextDeadlineNs) {
      // The timer fired early (it counts whole milliseconds): it waits again.
      if (this.#deadlineTimer === undefined) this.#armDeadlineTimer();
      return;
    }
    this.#nextDeadlineNs = this.#queue.expire(now, (p) => {
      p.leaveGate();
      p.reject(unavailable("Request timeout expired"));
    });
    this.#armDeadlineTimer();
  }

  /** Wakes the batcher when the earliest wait ends, whatever its instances are doing. */
  #armDeadlineTimer(): void {
    if (this.#deadlineTimer !== undefined) clearTimeout(this.#deadlineTimer);
    this.#deadlineTimer = undefined;
    if (this.#nextDeadlineNs === Number.POSITIVE_INFINITY) return;
    const waitMs = (this.#nextDeadlineNs - performance.now() * 1e6) / 1e6;
    this.#deadlineTimer = setTimeout(
      () => {
        this.#deadlineTimer = undefined;
        this.#expireWaits();
        this.#dispatch();
      },
      timerDelay(Math.max(1, Math.ceil(waitMs))),
    );
    // As #timer: a queued request's deadline does not hold a stopped server's process open.
    this.#deadlineTimer.unref();
  }

  /**
   * Takes the requests that can join the head's batch, or none if the batch should wait
   * for more (a timer, or the end of a running batch, then brings the decision back).
   * Behind a running batch only a full one is taken.
   */
  #collect(head: PendingRequest, behindRunning: boolean): PendingRequest[] {
    let rows = 0;
    const chosen: PendingRequest[] = [];
    for (const p of this.#queue) {
      if (p.settled || p.validated.batchKey !== head.validated.batchKey) continue;
      if (rows + p.validated.rows > this.#maxRows) break;
      chosen.push(p);
      rows += p.validated.rows;
      if (rows >= this.#targetRows) break;
    }
    if (behindRunning && rows < this.#targetRows) return [];
    const waitedNs = performance.now() * 1e6 - head.arrivalNs;
    if (rows < this.#targetRows && this.#delayNs > 0 && waitedNs < this.#delayNs) {
      this.#armTimer(this.#delayNs - waitedNs);
      return [];
    }
    this.#queue.takeAll(new Set(chosen));
    return chosen;
  }

  #armTimer(ns: number): void {
    if (this.#timer !== undefined) return;
    this.#timer = setTimeout(
      () => {
        this.#timer = undefined;
        this.#dispatch();
      },
      timerDelay(Math.max(1, Math.ceil(ns / 1e6))),
    );
    // Not cleared when a batch leaves early: unref'd so that a long queue delay does not
    // hold a stopped server's process open (the sequence instances' timer has the same fix).
    this.#timer.unref();
  }
}
