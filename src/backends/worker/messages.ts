import type { ErrorCode } from "../../core/errors.ts";
import type { ModelIo } from "../../core/model-io.ts";
import type { OnnxSessionOptions } from "../onnx/session-options.ts";
import type { WireTensor } from "./wire-tensor.ts";

// Every message between the main thread and a worker that hosts model instances. Each
// instance is loaded once under its name; the worker answers runs in the order they
// arrive, whichever instance they are for, unloads an instance when told, and ends when
// told to close. Every message for or about an instance carries its key: unique to one
// executor, where instance names repeat (a model's old and new version while it reloads).

// ── main thread → worker ────────────────────────────────────────────────────────────

/** An executor's key for its instance: the instance's name, "#" and the executor's number. */
export const instanceKeyOf = (instanceName: string, executor: number): string =>
  `${instanceName}#${executor}`;

/** The instance's name in an instance key, for messages. */
export const instanceNameOf = (instanceKey: string): string =>
  instanceKey.slice(0, instanceKey.lastIndexOf("#"));

export interface LoadMessage {
  readonly type: "load";
  /** See instanceKeyOf: "simple_0#3". */
  readonly instanceKey: string;
  readonly modelPath: string;
  readonly sessionOptions: OnnxSessionOptions;
  /**
   * Set where the instance's thread is shared: instances loaded under one key there share
   * one session (a model's own instances). A file alone in its folder is shared by the
   * content the worker loads instead, and this key is the main thread's guess at it, for
   * placement (onnx/session-keys.ts). None: a session of its own.
   */
  readonly sessionKey?: string;
}

export interface RunMessage {
  readonly type: "run";
  readonly instanceKey: string;
  /** Positive, unique per instance; the result or error carries it back. */
  readonly id: number;
  readonly inputs: readonly WireTensor[];
  readonly outputNames: readonly string[];
  /** When it was posted: `performance.timeOrigin + performance.now()`, one clock for every thread. */
  readonly postedAt: number;
}

/** Release one instance's model once the runs already sent are answered. */
interface UnloadMessage {
  readonly type: "unload";
  readonly instanceKey: string;
}

/** Release every model and end the thread once the runs already sent are answered. */
interface CloseMessage {
  readonly type: "close";
}

export type ToWorkerMessage = LoadMessage | RunMessage | UnloadMessage | CloseMessage;

// ── worker → main thread ────────────────────────────────────────────────────────────

interface LoadedMessage {
  readonly type: "loaded";
  readonly instanceKey: string;
  readonly io: ModelIo;
  /** Whether the instance took a session already loaded on its thread (onnx-worker.ts). */
  readonly sharesSession: boolean;
}

interface UnloadedMessage {
  readonly type: "unloaded";
  readonly instanceKey: string;
}

export interface ResultMessage {
  readonly type: "result";
  readonly instanceKey: string;
  readonly id: number;
  readonly outputs: readonly WireTensor[];
  /** How long the run waited in the worker behind earlier runs (from `postedAt`), ns. */
  readonly waitNs: number;
  /** Measured in the worker, in nanoseconds. */
  readonly inputNs: number;
  readonly inferNs: number;
  readonly outputNs: number;
}

export interface ErrorMessage {
  readonly type: "error";
  readonly instanceKey: string;
  /** The run that failed, or "load" when the model could not be loaded. */
  readonly id: number | "load";
  readonly code: ErrorCode;
  readonly message: string;
}

export type FromWorkerMessage = LoadedMessage | UnloadedMessage | ResultMessage | ErrorMessage;
