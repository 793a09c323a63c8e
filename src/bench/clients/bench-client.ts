import type { Tensor } from "../../core/tensor.ts";

// What the benchmark asks of a protocol: send one step (one inference) and give back its
// outputs, decoded, so they can be checked. A step of a sequence model belongs to a
// sequence; the client keeps whatever the protocol needs per sequence (a WebSocket, a
// SageMaker session id, a stream).

export const PROTOCOLS = [
  "http-json",
  "http-binary",
  "grpc",
  "grpc-stream",
  "ws",
  "tfs-grpc",
  "tfs-rest",
  "sagemaker",
  "sagemaker-stream",
] as const;
export type Protocol = (typeof PROTOCOLS)[number];

export interface BenchSequence {
  /** 0-based index among the run's sequences (or closed-loop clients, for a stateless model). */
  readonly index: number;
  /** The sequence id the benchmark chose (uint64); undefined for a stateless model. */
  readonly id: bigint | undefined;
  /** The protocol's own per-sequence state. */
  session?: unknown;
}

export interface StepFlags {
  readonly start: boolean;
  readonly end: boolean;
  /**
   * The step's place in its sequence (1 for the start), sent as `sequence_step` where the
   * protocol has it: a step retried after a failure is then answered, never applied twice.
   */
  readonly step?: number;
}

/**
 * Failures that mean "try again": the connection failed, a gateway lost the request, or
 * the server is unavailable for now (a 503 is UNAVAILABLE over HTTP).
 */
const TRY_AGAIN = /^(connection|http 50[234]|grpc UNAVAILABLE)$/;

/**
 * A step that failed in the model (a 500, INTERNAL): sent again, it fails again, or over
 * TF-Serving, where a failed START leaves its sequence, is refused as ALREADY_EXISTS and
 * the model's error is lost; and the errors counted would differ between protocols.
 */
const MODEL_FAILED = /^(http 500|grpc INTERNAL)$/;

/** Failures after which the same step may be sent again (nothing was answered, or the server asked). */
export function retryable(error: StepError): boolean {
  if (TRY_AGAIN.test(error.kind)) return true;
  // A stream's errors come in-band, without their status: the server's words then say it.
  return !MODEL_FAILED.test(error.kind) && /retry/i.test(error.message);
}

/** A failed step: `kind` groups failures in the report (an HTTP status, a gRPC code, ...). */
export class StepError extends Error {
  readonly kind: string;

  constructor(kind: string, message: string) {
    super(message);
    this.name = "StepError";
    this.kind = kind;
  }
}

export interface BenchClient {
  step(
    sequence: BenchSequence,
    inputs: ReadonlyMap<string, Tensor>,
    flags: StepFlags,
  ): Promise<Map<string, Tensor>>;
  close(): Promise<void>;
}

export interface ClientTarget {
  readonly model: string;
  /** Where each of the server's endpoints listens (undefined: not given, or not served). */
  readonly http: Endpoint | undefined;
  readonly grpc: Endpoint | undefined;
  readonly sagemaker: Endpoint | undefined;
  /** Requests in flight at most (sizes connection pools). */
  readonly concurrency: number;
  /** For grpc-stream: how many ModelStreamInfer streams carry the sequences. */
  readonly streams: number;
  /** Outputs to ask for in binary form / decode. */
  readonly outputs: readonly string[];
  /** Sent with every request (HTTP headers, gRPC metadata, the WebSocket upgrade), e.g. an API key. */
  readonly headers?: Readonly<Record<string, string>>;
  /**
   * The model is decoupled: a request may bring no response or several. The stream clients
   * ask for an empty final response and take a step as answered at its final response.
   */
  readonly decoupled?: boolean;
  /** A step not answered in this long fails as a "timeout" (default STEP_TIMEOUT_MS). */
  readonly stepTimeoutMs?: number;
}

/** The protocols that carry a decoupled model's responses (the others refuse it: 501, UNIMPLEMENTED). */
export const DECOUPLED_PROTOCOLS: readonly Protocol[] = ["ws", "grpc-stream"];

/**
 * How long a client waits for a step's answer (HTTP: for the next bytes of it). Nothing
 * else would end the wait: a lane whose answer never came stalled for the rest of the run,
 * and the run never ended. Generous, so that a slow model or a long queue is measured, not
 * cut short.
 */
export const STEP_TIMEOUT_MS = 60_000;

/** The failure of a step whose answer did not come in time. */
export const timedOut = (ms: number): StepError => new StepError("timeout", `no answer in ${ms / 1000} s`);

export interface Endpoint {
  readonly host: string;
  readonly port: number;
}

/** `host:port` for a URL or a gRPC target (an IPv6 host in brackets). */
export function authority({ host, port }: Endpoint): string {
  return host.includes(":") ? `[${host}]:${port}` : `${host}:${port}`;
}

export function required(endpoint: Endpoint | undefined, what: string): Endpoint {
  if (endpoint === undefined) throw new Error(`this protocol needs the server's ${what} endpoint`);
  return endpoint;
}
