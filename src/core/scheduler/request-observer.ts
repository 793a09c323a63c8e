import type { ServerError } from "../errors.ts";
import type { InferRequest, SequenceId } from "../infer.ts";
import type { RequestTimings } from "../statistics.ts";
import type { Tensor } from "../tensor.ts";

// What a model tells whoever watches its requests (latency metrics, tracing): one call per
// request, when it is answered, with what is already at hand then (and, to those that ask,
// one as it arrives). Observers keep their share small (a histogram observation, a
// sampling counter), do anything heavier only for the requests they pick, and never throw.

export interface RequestRecord {
  readonly request: InferRequest;
  /** When the model took the request, in ns on the `performance.now()` clock. */
  readonly arrivalNs: number;
  /** From arrival to the answer, in ns. */
  readonly totalNs: number;
  /** The sequence the request belongs to (an id the server assigned included). */
  readonly sequenceId: SequenceId | undefined;
  /** Present when the request was answered with outputs. */
  readonly timings?: RequestTimings;
  /**
   * From arrival to the first response, in ns, for a request of a decoupled model that
   * sent any (`totalNs` runs to its last); otherwise the one answer is the first.
   */
  readonly firstResponseNs?: number;
  /** A request of a decoupled model, answered by as many responses as it sent: none, without `firstResponseNs`. */
  readonly streamed?: true;
  readonly outputs?: ReadonlyMap<string, Tensor>;
  /** Present when the request failed. */
  readonly error?: ServerError;
  /** A failed request that had gone to a model instance: it failed there, or after (its state). */
  readonly dispatched?: true;
  /**
   * A failed request refused before the model's scheduler took it (a malformed one, a
   * full queue, a sequence step without its START): as in Triton, no failure of the
   * model's, in the statistics and the metrics alike.
   */
  readonly refused?: true;
}

export interface RequestObserver {
  /**
   * The model took the request, before anything ran: what must be seen as it came (a
   * traced request's input tensors, which go to the model's thread) is taken now.
   */
  requestArrived?(request: InferRequest): void;
  requestDone(record: RequestRecord): void;
  /**
   * The model version is gone (unloaded, replaced, or its load failed): what is kept for
   * it may go, as Triton drops an unloaded model's metric series. Called once.
   */
  close?(): void;
}

/** Builds a model version's request observer; undefined when nothing watches its requests. */
export type RequestObserverFactory = (model: string, version: string) => RequestObserver | undefined;
