import { unavailable } from "../errors.ts";
import type { DynamicBatchingConfig, QueuePolicyConfig } from "../model-config.ts";
import { requestLabel } from "../request-label.ts";
import type { PendingRequest } from "./pending-request.ts";
import { queueDeadlineNs } from "./queue-deadline.ts";
import { Deque } from "./request-queue.ts";

// The dynamic batcher's queue, as Triton's priority queue keeps it (scheduler_utils.cc):
// one queue per priority level, each under its level's policy (its own, or the default
// one): how many requests it holds (max_queue_size, refused UNAVAILABLE "Exceeds maximum
// queue size"), how long one may wait, and what happens after (timeout_action). Requests
// are served level by level, the lowest number first; within a level in arrival order,
// then those whose wait ran out under DELAY. A request's `priority` picks its level: 0 or
// one past the levels is the default level, as Triton's SetPriority reads it. A model
// without priority levels has one queue, under the default policy.

interface Level {
  readonly level: number;
  readonly policy: QueuePolicyConfig;
  readonly waiting: Deque<PendingRequest>;
  /** Requests whose wait ran out under timeout_action DELAY: served after `waiting`. */
  readonly delayed: Deque<PendingRequest>;
}

/** The request's `priority` parameter as a number (0: none); bigints past 2^53 are "past the levels". */
function priorityOf(pending: PendingRequest): number {
  const value = pending.request.parameters.priority;
  if (typeof value === "number") return value;
  if (typeof value === "bigint")
    return value > BigInt(Number.MAX_SAFE_INTEGER) ? Number.MAX_SAFE_INTEGER : Number(value);
  return 0;
}

export class PriorityQueue {
  readonly #config: DynamicBatchingConfig | undefined;
  /** Levels in service order (ascending), created as requests come. */
  #levels: Level[] = [];
  readonly #byRequest = new Map<PendingRequest, Level>();

  constructor(config: DynamicBatchingConfig | undefined) {
    this.#config = config;
  }

  /** Requests held (waiting and delayed). */
  get length(): number {
    return this.#byRequest.size;
  }

  /** Whether any level has a policy that a request waiting with an instance would escape. */
  static policed(config: DynamicBatchingConfig | undefined): boolean {
    if (config === undefined) return false;
    const policies = [config.defaultQueuePolicy, ...config.priorityQueuePolicies.values()];
    // Triton stops prefetching with priority levels too: a request of a higher level must
    // not find the instance holding lower ones.
    return config.priorityLevels > 0 || policies.some((p) => p.timeout !== undefined || p.maxQueueSize > 0);
  }

  /** Queues `pending` at its level; throws UNAVAILABLE when that level's queue is full. */
  push(pending: PendingRequest): Level {
    const level = this.#levelFor(priorityOf(pending));
    const max = level.policy.maxQueueSize;
    if (max > 0 && level.waiting.length + level.delayed.length >= max) {
      throw unavailable(`${requestLabel(pending.request.id)}Exceeds maximum queue size`, 1);
    }
    level.waiting.push(pending);
    this.#byRequest.set(pending, level);
    const timeout = level.policy.timeout;
    if (timeout !== undefined) pending.queueDeadlineNs = queueDeadlineNs(timeout, pending);
    return level;
  }

  #levelFor(priority: number): Level {
    const config = this.#config;
    const levels = config?.priorityLevels ?? 0;
    const number =
      levels === 0 ? 0 : priority === 0 || priority > levels ? config!.defaultPriorityLevel : priority;
    let low = 0;
    let high = this.#levels.length;
    while (low < high) {
      const mid = (low + high) >>> 1;
      if (this.#levels[mid]!.level < number) low = mid + 1;
      else high = mid;
    }
    const found = this.#levels[low];
    if (found !== undefined && found.level === number) return found;
    const level: Level = {
      level: number,
      policy: config?.priorityQueuePolicies.get(number) ?? config?.defaultQueuePolicy ?? { maxQueueSize: 0 },
      waiting: new Deque(),
      delayed: new Deque(),
    };
    this.#levels.splice(low, 0, level);
    return level;
  }

  /** Takes `pending` out (cancelled); false when it was not held. */
  remove(pending: PendingRequest): boolean {
    const level = this.#byRequest.get(pending);
    if (level === undefined) return false;
    this.#byRequest.delete(pending);
    if (level.waiting.remove((p) => p === pending) === undefined) level.delayed.remove((p) => p === pending);
    return true;
  }

  /** The next request to serve, past any that settled while they waited. */
  head(): PendingRequest | undefined {
    for (const level of this.#levels) {
      for (const queue of [level.waiting, level.delayed]) {
        for (let p = queue.peek(); p !== undefined; p = queue.peek()) {
          if (!p.settled) return p;
          queue.shift();
          this.#byRequest.delete(p);
        }
      }
    }
    return undefined;
  }

  /** Takes the next request to serve. */
  shift(): PendingRequest | undefined {
    const head = this.head();
    if (head !== undefined) this.#take(head);
    return head;
  }

  #take(pending: PendingRequest): void {
    const level = this.#byRequest.get(pending)!;
    this.#byRequest.delete(pending);
    if (level.waiting.peek() === pending) level.waiting.shift();
    else if (level.delayed.peek() === pending) level.delayed.shift();
    else if (level.waiting.remove((p) => p === pending) === undefined)
      level.delayed.remove((p) => p === pending);
  }

  /** The requests in the order they are served. */
  *[Symbol.iterator](): IterableIterator<PendingRequest> {
    for (const level of this.#levels) {
      yield* level.waiting;
      yield* level.delayed;
    }
  }

  /** Takes the requests `taken` into a batch out, and drops those that settled meanwhile. */
  takeAll(taken: ReadonlySet<PendingRequest>): void {
    for (const level of this.#levels) {
      for (const queue of [level.waiting, level.delayed]) {
        if (queue.length === 0) continue;
        const rest = queue.drain();
        for (const p of rest) {
          if (taken.has(p) || p.settled) this.#byRequest.delete(p);
          else queue.push(p);
        }
      }
    }
  }

  /** Every request held, taken out. */
  drain(): PendingRequest[] {
    const all = [...this];
    for (const level of this.#levels) {
      level.waiting.drain();
      level.delayed.drain();
    }
    this.#byRequest.clear();
    return all;
  }

  /**
   * Applies each level's timeout_action to the requests whose wait is over at `nowNs`:
   * DELAY moves them behind their level's other requests, REJECT hands them to `rejected`.
   * Returns the earliest deadline still ahead (Infinity: none). Without overrides a level's
   * requests wait as long each, so deadlines follow its order and only its head is looked at.
   */
  expire(nowNs: number, rejected: (pending: PendingRequest) => void): number {
    let next = Number.POSITIVE_INFINITY;
    for (const level of this.#levels) {
      const timeout = level.policy.timeout;
      if (timeout === undefined || level.waiting.length === 0) continue;
      const over = (p: PendingRequest): void => {
        if (timeout.action === "DELAY") level.delayed.push(p);
        else {
          this.#byRequest.delete(p);
          rejected(p);
        }
      };
      if (!timeout.allowOverride) {
        for (let p = level.waiting.peek(); p !== undefined; p = level.waiting.peek()) {
          if (!p.settled && p.queueDeadlineNs > nowNs) {
            next = Math.min(next, p.queueDeadlineNs);
            break;
          }
          level.waiting.shift();
          if (p.settled) this.#byRequest.delete(p);
          else over(p);
        }
      } else {
        for (const p of level.waiting.drain()) {
          if (p.settled) this.#byRequest.delete(p);
          else if (p.queueDeadlineNs > nowNs) {
            level.waiting.push(p);
            next = Math.min(next, p.queueDeadlineNs);
          } else over(p);
        }
      }
    }
    return next;
  }
}
