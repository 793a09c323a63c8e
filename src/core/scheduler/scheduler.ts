import type { PendingRequest } from "./pending-request.ts";

// A model version's scheduler: takes validated requests and runs them on the model's
// instances. Strategies (direct, dynamic batching, sequence batching) sit behind this
// small interface; the model never knows which one it has.

export interface Scheduler {
  /** Accepts a request; it settles through `pending.promise`. May throw a ServerError to refuse it. */
  enqueue(pending: PendingRequest): void;
  /** Requests accepted and not yet settled. */
  readonly pending: number;
  /** Refuse new work that would outlive shutdown (new sequences); let the rest finish. */
  beginShutdown(): void;
  /** Resolves once nothing is pending, or at `deadlineMs` (epoch ms) after failing what is left. */
  drain(deadlineMs: number): Promise<void>;
}
