// The API of model code written in TypeScript (or JavaScript): what a `model.ts` in a
// model's version folder implements when its config says `backend: "typescript"`, and
// what seqserve gives it. Types only: a handler imports them with `import type`, and
// nothing here loads at run time.
//
//   import type { Handler } from "seqserve";
//   export default {
//     execute(requests) {
//       return requests.map((r) => ({ outputs: { OUT: r.inputs.IN! } }));
//     },
//   } satisfies Handler;

import type { DataType } from "./core/datatype.ts";
import type { Tensor as CoreTensor } from "./core/tensor.ts";

export type { DataType };

/**
 * A tensor: row-major `data` in the typed array of its datatype (Float32Array for FP32,
 * BigInt64Array for INT64, Uint8Array for BOOL, Uint16Array bit patterns for FP16/BF16…),
 * and for BYTES one Uint8Array per element.
 */
export type Tensor = CoreTensor;

export type ParameterValue = boolean | number | bigint | string;

/**
 * Why a sequence ended, as `sequenceEnded` is told:
 * - `end`: a request with `sequence_end` ran, or the client closed it (SageMaker CLOSE, a
 *   WebSocket closed deliberately);
 * - `timeout`: no request for `max_sequence_idle_microseconds`;
 * - `restart`: a request with `sequence_start` reused its id: a new sequence begins;
 * - `cancelled`: a client gave up on one of its requests (the call was cancelled, the
 *   connection broke);
 * - `forced`: an operator ended it (`DELETE /v2/models/{m}/sequences/{id}`), or the request
 *   that started it with a server-assigned id failed;
 * - `expired`: a SageMaker session reached its expiry;
 * - `evicted`: the server dropped it to make room;
 * - `unloaded`: the model version was unloaded or replaced while it was live;
 * - `shutdown`: the server stopped.
 */
export type SequenceEndReason =
  | "end"
  | "timeout"
  | "restart"
  | "cancelled"
  | "forced"
  | "expired"
  | "evicted"
  | "unloaded"
  | "shutdown";

/**
 * What a sequence keeps between its requests, for as long as it lives. Values are tensors
 * (kept as they are, and moved between threads without copying) or anything the
 * structured-clone algorithm can copy (objects, arrays, strings, Maps, typed arrays…).
 * `get` hands out the stored value; changes to an object are kept when it is `set` again,
 * a tensor's data changed in place is kept as it is. A request that fails leaves the
 * state as it was before it ran, tensors changed in place included (a tensor's first
 * `get` in a request copies its data aside for that).
 */
export interface SequenceState {
  get<T = unknown>(key: string): T | undefined;
  set(key: string, value: unknown): void;
  has(key: string): boolean;
  delete(key: string): boolean;
  clear(): void;
  keys(): string[];
  readonly size: number;
}

export interface HandlerSequence {
  /** The sequence id: a uint64 as bigint, or a string. */
  readonly id: bigint | string;
  /** The first request of the sequence: its state is empty. */
  readonly start: boolean;
  /** The last request: `sequenceEnded(…, "end")` follows once it is answered. */
  readonly end: boolean;
  readonly state: SequenceState;
}

export interface HandlerResponse {
  /** Output tensors by name (outputs the client did not ask for are dropped). */
  readonly outputs: Readonly<Record<string, Tensor>>;
  readonly parameters?: Readonly<Record<string, ParameterValue>>;
}

export interface SendOptions {
  /** This response is the request's last (as `complete()` after it). */
  readonly final?: boolean;
}

export interface HandlerRequest {
  /** The client's request id ("" when it gave none). */
  readonly id: string;
  readonly inputs: Readonly<Record<string, Tensor>>;
  readonly parameters: Readonly<Record<string, ParameterValue>>;
  /** The outputs the client asked for. */
  readonly outputs: readonly string[];
  /** Present for models served with sequence batching. */
  readonly sequence: HandlerSequence | undefined;
  /** Aborted when the client goes away or the request times out: stop working on it. */
  readonly signal: AbortSignal;
  /**
   * Decoupled models: sends one response now. Resolves when the client can take more: a
   * client that reads slowly makes this wait. Rejects once the request is cancelled. Await
   * it: a send while the client still has the limit's worth unread fails the request.
   */
  send(response: HandlerResponse, options?: SendOptions): Promise<void>;
  /**
   * Decoupled models: the request is complete (with `error`, it fails with its message).
   * On a request already cancelled (its signal aborted), it tells the server the code has
   * stopped working on it: its sequence's next step waits for that (or for a while).
   */
  complete(error?: Error): void;
}

/** A request to another model served by the same server (`context.infer`). */
export interface CallRequest {
  readonly inputs: Readonly<Record<string, Tensor>>;
  /** Outputs wanted; all by default. */
  readonly outputs?: readonly string[];
  /** Including sequence fields: `sequence_id`, `sequence_start`, `sequence_end`. */
  readonly parameters?: Readonly<Record<string, ParameterValue>>;
  readonly id?: string;
  /** A version of the model; the latest ready one by default. */
  readonly version?: string;
  /**
   * Cancels the call when aborted (pass the calling request's `signal`, so that a client
   * who leaves stops the work done for it): the call rejects with `code` "CANCELLED" at
   * once, and the other model drops the request if it has not started it.
   */
  readonly signal?: AbortSignal;
}

export interface CallResponse {
  readonly modelName: string;
  readonly modelVersion: string;
  readonly id: string;
  readonly outputs: Readonly<Record<string, Tensor>>;
  readonly parameters: Readonly<Record<string, ParameterValue>>;
}

/** A failed `context.infer`: the status class and the message the server would answer. */
export interface CallError extends Error {
  readonly code: string;
}

/**
 * Lines in the server's log, naming the model and instance. `fields` join the line; one
 * named as a key the line has already (`level`, `time`, `msg`, `name`, `model`, `instance`,
 * `pid`, `hostname`, `handler`) is written as `handler_<key>`.
 */
export interface HandlerLog {
  debug(message: string, fields?: Record<string, unknown>): void;
  info(message: string, fields?: Record<string, unknown>): void;
  warn(message: string, fields?: Record<string, unknown>): void;
  error(message: string, fields?: Record<string, unknown>): void;
}

export interface HandlerContext {
  readonly model: {
    readonly name: string;
    readonly version: string;
    /** This instance, e.g. "chat_0": one handler module is loaded per instance (worker thread). */
    readonly instance: string;
    /** The config's `parameters`. */
    readonly parameters: Readonly<Record<string, string>>;
    /** The version folder the handler file is in (for files it ships). */
    readonly directory: string;
  };
  readonly log: HandlerLog;
  /**
   * Runs a request on another model, through that model's scheduler (so it is batched with
   * the rest of its traffic). Rejects with a CallError when the model refuses or fails,
   * or when no answer comes within the model's `handler_call_timeout_ms`.
   */
  infer(model: string, request: CallRequest): Promise<CallResponse>;
  /** Ends a sequence of another model without a request (as a SageMaker CLOSE); false when it is not live. */
  closeSequence(model: string, id: bigint | string): Promise<boolean>;
}

export interface EndedSequence {
  readonly id: bigint | string;
  /** Its state as its last request left it; freed after `sequenceEnded` returns. */
  readonly state: SequenceState;
}

/**
 * What `execute` returns: for a model that is not decoupled, one response or Error per
 * request, in order (an Error fails only its request). A decoupled model answers through
 * `request.send` / `request.complete` instead (a returned array sends each entry as its
 * request's final response).
 */
// biome-ignore lint/suspicious/noConfusingVoidType: an execute() that returns nothing (a decoupled model) must type-check
export type ExecuteResult = readonly (HandlerResponse | Error)[] | undefined | void;

export interface Handler {
  /** Once per instance, before any request. */
  initialize?(context: HandlerContext): void | Promise<void>;
  /** A batch of requests (of several sequences, never two of one sequence). */
  execute(
    requests: readonly HandlerRequest[],
    context: HandlerContext,
  ): ExecuteResult | Promise<ExecuteResult>;
  /** A sequence this instance ran has ended, and why; its state is freed right after. */
  sequenceEnded?(
    sequence: EndedSequence,
    reason: SequenceEndReason,
    context: HandlerContext,
  ): void | Promise<void>;
  /** Once, when the instance is unloaded. */
  finalize?(): void | Promise<void>;
}

/** A tensor a handler declares (`export const metadata`), as a model file declares its inputs. */
export interface TensorSpec {
  readonly name: string;
  readonly datatype: DataType;
  /** With the batch dimension first as -1 when the model batches; -1 for any size. */
  readonly shape: readonly number[];
}

/** Lets a config leave out `input` and `output` (Triton's auto-complete): what the handler takes and gives. */
export interface HandlerMetadata {
  readonly inputs: readonly TensorSpec[];
  readonly outputs: readonly TensorSpec[];
}
