import type { Tensor } from "./tensor.ts";

// The protocol-free request and response. Every frontend decodes its wire format into
// an InferRequest and encodes the InferResponse back; nothing below the frontends knows
// which protocol a request came from.

/** A request or response parameter: KServe's bool / int64 / uint64 / double / string. */
export type ParameterValue = boolean | number | bigint | string;
export type Parameters = Readonly<Record<string, ParameterValue>>;

/** A sequence (correlation) id: uint64 as bigint, or a non-empty string. */
export type SequenceId = bigint | string;

export interface SequenceControl {
  /** Undefined when the request carries none (0 or ""): only a start may omit it. */
  readonly id: SequenceId | undefined;
  readonly start: boolean;
  readonly end: boolean;
  /** Triton's request `timeout` (µs): how long the sequence may wait in the backlog. */
  readonly timeoutUs: number | undefined;
  /** How ids in an unexpected state are treated; undefined = "restart". */
  readonly admission?: SequenceAdmission;
  /**
   * The request's place in its sequence (`sequence_step`: 1 for the START, 2 for the next
   * request…), when the client gives it: a step already applied is answered from the
   * recorded answer instead of running again (exactly-once retries).
   */
  readonly step?: number;
  /**
   * A client giving up on this request (its connection closed, its deadline passed) only
   * drops it, if it has not run, and the sequence goes on: for protocols without
   * cancellation (a SageMaker session lives until closed or expired). Triton ends the
   * sequence of a cancelled request; OVMS's admission and numbered steps keep it anyway.
   */
  readonly keepOnCancel?: boolean;
  /**
   * Told, during admission, that the scheduler took this START: from then on the id
   * names the sequence it began (a live sequence of that id has ended, reason "restart").
   * A START refused before (invalid, another caller's id, no room) began nothing and
   * is not told; one that fails later was taken all the same.
   */
  readonly onStarted?: () => void;
  /**
   * Told `true` when the request begins to wait for its sequence to get a slot, its input
   * bytes held meanwhile in the server's budget of waiting requests (--max-queued-start-bytes,
   * queue-budget.ts), and `false` when it stops (handed to a model instance, or answered):
   * while it waits, that budget bounds what it holds, and a frontend that bounds what its
   * stream holds need not count it (stream-infer.ts).
   */
  readonly onWaitingForSlot?: (waiting: boolean) => void;
  /**
   * The sequence this START begins ends (reason "forced") if the START fails, as one with
   * a server-assigned id does: for a client that never continues a sequence whose start
   * failed (a WebSocket stream starts again). Otherwise, as in Triton, it stays live.
   */
  readonly endIfStartFails?: boolean;
}

/**
 * How the sequence batcher admits a request whose id is in an unexpected state. The
 * frontend picks what its protocol promises:
 * - "restart": a START on a live id ends that sequence (reason "restart") and begins a new
 *   one with fresh state; a request without START for an unknown id is refused as invalid
 *   (INVALID_ARG: it should have carried START).
 * - "exclusive": an id belongs to its sequence until the sequence has ended: a START on a
 *   live id is refused (ALREADY_EXISTS), a START on an id whose END has not run yet too
 *   (FAILED_PRECONDITION), and a request for an unknown id is NOT_FOUND.
 */
type SequenceAdmission = "restart" | "exclusive";

/** A caller's W3C trace context (`traceparent` / `tracestate`), carried for tracing. */
export interface TraceCarrier {
  readonly traceparent: string;
  readonly tracestate?: string | undefined;
}

/** When a request was read, on the `performance.now()` clock in ns, and over what. */
export interface ReceivedAt {
  readonly frontend: "HTTP" | "GRPC";
  readonly startNs: number;
  readonly endNs: number;
}

export interface InferRequest {
  /** The client's request id, echoed in the response ("" when absent). */
  readonly id: string;
  readonly inputs: ReadonlyMap<string, Tensor>;
  /** Requested output names in response order; undefined = every output. */
  readonly outputs: readonly string[] | undefined;
  readonly parameters: Parameters;
  /** Present when the request carries any sequence field. */
  readonly sequence: SequenceControl | undefined;
  /** Aborts the request while it has not run (client gone, call cancelled). */
  readonly signal?: AbortSignal;
  /** The caller's trace context, when it sent one: traced requests join its trace. */
  readonly trace?: TraceCarrier | undefined;
  /** When the frontend received it (Triton's trace names them HTTP_RECV_*, GRPC_WAITREAD_*). */
  readonly received?: ReceivedAt | undefined;
  /**
   * Who sent it: the name of the API key it was authenticated with; undefined when the
   * API needs no key. A sequence belongs to the caller that started it: only that caller
   * may continue, restart or end it.
   */
  readonly principal?: string | undefined;
}

export interface NamedTensor extends Tensor {
  readonly name: string;
}

export interface InferResponse {
  readonly modelName: string;
  readonly modelVersion: string;
  readonly id: string;
  /** e.g. `sequence_id` for a server-assigned id. */
  readonly parameters: Parameters;
  readonly outputs: readonly NamedTensor[];
}
