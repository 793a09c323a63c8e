import type { SequenceEndReason } from "../model.ts";
import type { PendingRequest } from "./pending-request.ts";

/** Why a scheduler drains: the server stops, or only the model is unloaded. */
export type DrainReason = Extract<SequenceEndReason, "shutdown" | "unloaded">;

// A model version's scheduler: takes validated requests and runs them on the model's
// instances. Strategies (direct, dynamic batching, sequence batching) sit behind this
// small interface; the model never knows which one it has.

export interface Scheduler {
  /** Accepts a request; it settles through `pending.promise`. May throw a ServerError to refuse it. */
  enqueue(pending: PendingRequest): void;
  /** Requests accepted and not yet settled. */
  readonly pending: number;
  /** Of those, the requests handed to a model instance (running, or next in its worker). */
  readonly running: number;
  /** Refuse new work that would outlive shutdown (new sequences); let the rest finish. */
  beginShutdown(): void;
  /**
   * Resolves once nothing is pending, or at `deadlineMs` (epoch ms) after failing what is
   * left; live sequences then end with `reason` (default "shutdown").
   */
  drain(deadlineMs: number, reason?: DrainReason): Promise<void>;
}
