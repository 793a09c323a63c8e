import type { ErrorCode, ErrorReason } from "../../core/errors.ts";
import type { ExecutionSequence } from "../../core/executor.ts";
import type { ParameterValue, SequenceId } from "../../core/infer.ts";
import type { ModelIo } from "../../core/model-io.ts";
import type { SequenceEndReason } from "../../handler-api.ts";
import type { WireTensor } from "../worker/wire-tensor.ts";

// Every message between the main thread and a handler worker (one handler module instance
// per worker). Tensors travel as WireTensors (transferred where the sender owns them);
// per-sequence state travels as entries (tensors, or values serialised by the worker).
//
// A request is identified by a `rid` unique per executor. Its life: it arrives in an
// `execute` batch; a decoupled request may send `response`s (each acknowledged by a
// `credit` once the client has taken it); it ends with exactly one `done`, which brings
// its sequence's state back. A batch ends with `executed` when execute() has returned.

export type Parameters = Readonly<Record<string, ParameterValue>>;

/** One entry of a sequence's state in transit. */
export type WireStateEntry =
  | { readonly key: string; readonly tensor: WireTensor }
  | { readonly key: string; readonly serialized: Uint8Array };

export interface WireError {
  readonly code: ErrorCode;
  readonly message: string;
  readonly reason?: ErrorReason;
}

// ── main thread → worker ────────────────────────────────────────────────────────────

export interface HandlerLoadMessage {
  readonly type: "load";
  readonly instanceName: string;
  readonly modelName: string;
  readonly version: string;
  /** The handler file (model.ts / model.js). */
  readonly modelPath: string;
  /** A TypeScript handler compiled to one ES module file (compile-handler.ts), imported in its place. */
  readonly compiledPath?: string;
  readonly parameters: Readonly<Record<string, string>>;
  readonly limits: HandlerLimits;
}

export interface HandlerLimits {
  /** Most untaken responses per decoupled request before send() waits. */
  readonly maxUnackedResponses: number;
  readonly maxUnackedBytes: number;
  /** context.infer calls in flight at once; more wait their turn. */
  readonly maxConcurrentCalls: number;
  /** A sequence's state above this many bytes fails the request that made it. */
  readonly maxStateBytes: number;
}

export interface WireSequence {
  readonly id: SequenceId;
  readonly key: string;
  readonly start: boolean;
  readonly end: boolean;
  readonly state: readonly WireStateEntry[];
  /** The server's --max-state-bytes and the room it leaves this state (ExecutionSequence.stateBudget). */
  readonly stateBudget?: ExecutionSequence["stateBudget"];
}

export interface WireRequest {
  readonly rid: number;
  readonly id: string;
  readonly inputs: readonly WireTensor[];
  readonly outputNames: readonly string[];
  readonly parameters: Parameters;
  readonly sequence: WireSequence | undefined;
}

export interface ExecuteMessage {
  readonly type: "execute";
  readonly batch: number;
  readonly decoupled: boolean;
  readonly requests: readonly WireRequest[];
}

/** The client took `responses` responses (`bytes` in all) of request `rid`. */
export interface CreditMessage {
  readonly type: "credit";
  readonly rid: number;
  readonly responses: number;
  readonly bytes: number;
}

/** Stop request `rid`: its client left, or it ran out of time (then its state goes back as it was). */
export interface CancelMessage {
  readonly type: "cancel";
  readonly rid: number;
  readonly why: "client" | "timeout";
}

/** The main thread stops waiting for a decoupled handler to complete request `rid`, answered in its place. */
interface ReleaseMessage {
  readonly type: "release";
  readonly rid: number;
}

export interface EndedMessage {
  readonly type: "ended";
  readonly id: SequenceId;
  readonly reason: SequenceEndReason;
  readonly state: readonly WireStateEntry[];
}

export interface CallResultMessage {
  readonly type: "call-result";
  readonly cid: number;
  readonly result:
    | {
        readonly ok: true;
        readonly modelName: string;
        readonly modelVersion: string;
        readonly id: string;
        readonly outputs: readonly WireTensor[];
        readonly parameters: Parameters;
      }
    | { readonly ok: false; readonly error: WireError }
    | { readonly ok: true; readonly closed: boolean };
}

interface HandlerCloseMessage {
  readonly type: "close";
}

export type ToHandlerMessage =
  | HandlerLoadMessage
  | ExecuteMessage
  | CreditMessage
  | CancelMessage
  | ReleaseMessage
  | EndedMessage
  | CallResultMessage
  | HandlerCloseMessage;

// ── worker → main thread ────────────────────────────────────────────────────────────

interface HandlerLoadedMessage {
  readonly type: "loaded";
  /** What the handler's `metadata` declares; undefined when it declares nothing. */
  readonly io: ModelIo | undefined;
}

interface HandlerLoadFailedMessage {
  readonly type: "load-failed";
  readonly message: string;
  readonly stack: string | undefined;
}

export interface ResponseMessage {
  readonly type: "response";
  readonly rid: number;
  readonly outputs: readonly WireTensor[];
  readonly parameters: Parameters;
  readonly final: boolean;
  readonly bytes: number;
}

export interface DoneMessage {
  readonly type: "done";
  readonly rid: number;
  /** Undefined: the request succeeded. */
  readonly error: WireError | undefined;
  /** The response of a request that is not decoupled. */
  readonly outputs: readonly WireTensor[];
  readonly parameters: Parameters;
  /** The sequence's state after the request (as it was before, when the request failed). */
  readonly state: readonly WireStateEntry[] | undefined;
  /** Its batch's compute_input, _infer and _output, as the batch reports them (batch-clock.ts). */
  readonly inputNs: number;
  readonly inferNs: number;
  readonly outputNs: number;
}

interface ExecutedMessage {
  readonly type: "executed";
  readonly batch: number;
  /** The batch's compute_input, _infer and _output (batch-clock.ts). */
  readonly inputNs: number;
  readonly inferNs: number;
  readonly outputNs: number;
}

export interface CallMessage {
  readonly type: "call";
  readonly cid: number;
  readonly model: string;
  readonly version: string | undefined;
  readonly id: string;
  readonly inputs: readonly WireTensor[];
  readonly outputs: readonly string[] | undefined;
  readonly parameters: Parameters;
}

/** The handler gave up a call (its signal was aborted): the request stops where it can. */
interface CallCancelMessage {
  readonly type: "call-cancel";
  readonly cid: number;
}

export interface CloseSequenceMessage {
  readonly type: "close-sequence";
  readonly cid: number;
  readonly model: string;
  readonly id: SequenceId;
}

interface LogMessage {
  readonly type: "log";
  readonly level: "debug" | "info" | "warn" | "error";
  readonly message: string;
  readonly fields: Readonly<Record<string, unknown>> | undefined;
}

/**
 * An error nobody caught in the worker. `fatal`: the worker's own code failed, and the
 * worker ends (and is restarted) right after; otherwise it was the handler's code (an
 * unhandled rejection, an exception from a timer), and the worker goes on.
 */
interface FaultMessage {
  readonly type: "fault";
  readonly kind: "unhandled rejection" | "uncaught exception";
  readonly fatal: boolean;
  readonly message: string;
  readonly stack: string | undefined;
}

/**
 * Request `rid` of a sequence was answered in its code's place (it timed out, its client
 * left) while that code still runs: its sequence's next step and end wait in the worker
 * until the code is through with it (`through`). `waitingFor`: its batch's execute() has
 * not returned, or (decoupled) it has, and the code has not completed the request.
 */
export interface LingeringMessage {
  readonly type: "lingering";
  readonly rid: number;
  /** The request and its sequence, as the log names them. */
  readonly request: string;
  readonly sequence: string;
  readonly waitingFor: "execute" | "completion";
  /** When its code was handed the request (epoch ms). */
  readonly startedAtMs: number;
}

/**
 * Request `rid` waits behind its sequence's previous step (`held`), or has been handed to
 * execute() after waiting: its handler_timeout_ms runs only while the handler has it.
 */
interface HeldMessage {
  readonly type: "held";
  readonly rid: number;
  readonly held: boolean;
}

interface ThroughMessage {
  readonly type: "through";
  readonly rid: number;
}

export type FromHandlerMessage =
  | HandlerLoadedMessage
  | HandlerLoadFailedMessage
  | ResponseMessage
  | DoneMessage
  | ExecutedMessage
  | CallMessage
  | CallCancelMessage
  | CloseSequenceMessage
  | LogMessage
  | FaultMessage
  | LingeringMessage
  | HeldMessage
  | ThroughMessage;
