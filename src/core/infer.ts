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
}

/** A caller's W3C trace context (`traceparent` / `tracestate`), carried for tracing. */
export interface TraceCarrier {
  readonly traceparent: string;
  readonly tracestate?: string | undefined;
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
