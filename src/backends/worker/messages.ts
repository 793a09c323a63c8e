import type { ErrorCode } from "../../core/errors.ts";
import type { ModelIo } from "../../core/model-io.ts";
import type { OnnxSessionOptions } from "../onnx/session-options.ts";
import type { WireTensor } from "./wire-tensor.ts";

// Every message between the main thread and a model-instance worker. A worker hosts one
// model instance: it is told to load once, then answers runs in the order they arrive,
// until it is told to close (or is terminated).

// ── main thread → worker ────────────────────────────────────────────────────────────

export interface LoadMessage {
  readonly type: "load";
  /** e.g. "simple_0": named in the worker's messages. */
  readonly instanceName: string;
  readonly modelPath: string;
  readonly sessionOptions: OnnxSessionOptions;
}

export interface RunMessage {
  readonly type: "run";
  /** Positive, unique per worker; the result or error carries it back. */
  readonly id: number;
  readonly inputs: readonly WireTensor[];
  readonly outputNames: readonly string[];
  /** When it was posted: `performance.timeOrigin + performance.now()`, one clock for every thread. */
  readonly postedAt: number;
}

/** Release the model and end the thread once the runs already sent are answered. */
export interface CloseMessage {
  readonly type: "close";
}

export type ToWorkerMessage = LoadMessage | RunMessage | CloseMessage;

// ── worker → main thread ────────────────────────────────────────────────────────────

export interface LoadedMessage {
  readonly type: "loaded";
  readonly io: ModelIo;
}

export interface ResultMessage {
  readonly type: "result";
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
  /** The run that failed, or "load" when the model could not be loaded. */
  readonly id: number | "load";
  readonly code: ErrorCode;
  readonly message: string;
}

export type FromWorkerMessage = LoadedMessage | ResultMessage | ErrorMessage;
