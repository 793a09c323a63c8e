import { createWriteStream, mkdirSync, type WriteStream } from "node:fs";
import { dirname } from "node:path";
import { ServerError } from "../core/errors.ts";
import type { RequestRecord } from "../core/scheduler/request-observer.ts";
import type { BytesElements, Tensor } from "../core/tensor.ts";
import { requestTimeline } from "./request-timeline.ts";
import type { TraceSink } from "./trace-manager.ts";
import type { TraceSetting } from "./trace-setting.ts";

// Triton's own trace output (`--trace-config triton,file=<path>`): JSON arrays with, per
// traced request, an entry naming the model and the request, one entry per timestamp
// (level TIMESTAMPS), and one per input and output tensor (level TENSORS). Timestamps are
// nanoseconds of a monotonic clock, as Triton's steady clock.
//
// Which file, as Triton's documentation says: a setting with a log frequency N writes
// `<file>.<i>`, closing it after N traces and going on in the next index; a setting with
// a count writes `<file>.<i>` too, closed when the count runs out (Triton's code does so
// only when it ran out at rate 1, which cannot be known at the first trace); other
// settings write `<file>`. Indexes are shared by every setting, from 0. A setting
// replaced while the server runs closes its open file.
//
// Entries are streamed as requests are traced (Triton keeps them in memory until it
// writes a file). While the disk is MAX_PENDING_BYTES behind, over all the files written,
// traces are dropped until it catches up, so what waits in memory is bounded in all. A file that cannot be
// written is reported and its traces dropped, as Triton logs "failed creating trace file"
// and goes on.

/** Bytes of the trace files waiting for the disk past which traces are dropped. */
const MAX_PENDING_BYTES = 64 * 1024 * 1024;

function tensorText(tensor: Tensor): string {
  const parts: string[] = [];
  if (tensor.datatype === "BYTES") {
    // Each element quoted, as Triton's tracer writes them (their bytes as text).
    for (const element of tensor.data as BytesElements) parts.push(`"${UTF8.decode(element)}"`);
    return parts.join(",");
  }
  const data = tensor.data as ArrayLike<unknown>;
  for (let i = 0; i < data.length; i++) parts.push(String(data[i]));
  return parts.join(",");
}

const UTF8 = new TextDecoder();

/** Told when a trace file cannot be written: its traces are dropped, the server goes on. */
export type TraceFileError = (path: string, error: Error) => void;

/** One JSON array being written. */
class TraceArray {
  readonly #stream: WriteStream;
  #first = true;
  #failed = false;
  traces = 0;

  constructor(path: string, onError: TraceFileError) {
    this.#stream = createWriteStream(path);
    this.#stream.on("error", (error) => {
      this.#failed = true;
      onError(path, error);
    });
    this.#stream.write("[");
  }

  get failed(): boolean {
    return this.#failed;
  }

  /** Bytes written to it that wait for the disk. */
  get pendingBytes(): number {
    return this.#stream.writableLength;
  }

  write(entry: unknown): void {
    if (this.#failed) return;
    this.#stream.write(`${this.#first ? "\n" : ",\n"}${JSON.stringify(entry)}`);
    this.#first = false;
  }

  end(): Promise<void> {
    if (this.#failed) return Promise.resolve();
    return new Promise((resolve) => {
      this.#stream.once("error", () => resolve());
      this.#stream.end("\n]\n", () => resolve());
    });
  }
}

/**
 * The sink writing to `path` (its folder made if missing; throws, naming it, when it cannot
 * be); traces are dropped while `maxPendingBytes` wait for the disk.
 */
export function tritonTraceFile(
  path: string,
  onError: TraceFileError,
  maxPendingBytes = MAX_PENDING_BYTES,
): TraceSink {
  try {
    mkdirSync(dirname(path), { recursive: true });
  } catch (error) {
    throw new ServerError(
      "INTERNAL",
      `cannot write traces to '${path}': its folder cannot be made (${(error as NodeJS.ErrnoException).code ?? (error as Error).message})`,
    );
  }
  let main: TraceArray | undefined;
  const parts = new Map<TraceSetting, TraceArray>();
  /** Files being closed, until their last bytes are written (close() waits on them). */
  const ending = new Map<TraceArray, Promise<void>>();
  /** Settings no longer in effect (whose requests picked before may still be answered). */
  const retired = new WeakSet<TraceSetting>();
  let nextIndex = 0;
  let nextId = 1;
  let closed = false;

  const arrayFor = (setting: TraceSetting): TraceArray => {
    if (setting.logFrequency === 0 && !setting.limited) {
      main ??= new TraceArray(path, onError);
      return main;
    }
    let part = parts.get(setting);
    if (part === undefined) {
      part = new TraceArray(`${path}.${nextIndex++}`, onError);
      parts.set(setting, part);
    }
    return part;
  };
  const endPart = (setting: TraceSetting): void => {
    const part = parts.get(setting);
    if (part === undefined) return;
    parts.delete(setting);
    finish(part);
  };
  const finish = (array: TraceArray): void => {
    ending.set(
      array,
      array.end().then(() => {
        ending.delete(array);
      }),
    );
  };

  /** What the files hold for the disk: the main one, a part per setting, those closing. */
  const pendingBytes = (): number => {
    let bytes = main?.pendingBytes ?? 0;
    for (const part of parts.values()) bytes += part.pendingBytes;
    for (const array of ending.keys()) bytes += array.pendingBytes;
    return bytes;
  };

  /** Writes one trace's lines to `array`. */
  const writeTrace = (
    array: TraceArray,
    setting: TraceSetting,
    model: string,
    version: string,
    record: RequestRecord,
    inputs: ReadonlyMap<string, Tensor> | undefined,
  ): void => {
    const id = nextId++;
    const requestId = record.request.id;
    // As Triton's, an empty request id is left out.
    array.write({
      id,
      model_name: model,
      model_version: Number(version),
      ...(requestId === "" ? {} : { request_id: requestId }),
    });
    if (setting.level.timestamps) {
      const timeline = requestTimeline(record);
      const startNs = record.arrivalNs;
      // The frontend's, first: when it read the request (trace_summary.py keeps the traces
      // that have them). The sending is not timed: a trace is written as it is answered.
      const received = record.request.received;
      if (received !== undefined) {
        const [start, end] =
          received.frontend === "HTTP"
            ? ["HTTP_RECV_START", "HTTP_RECV_END"]
            : ["GRPC_WAITREAD_START", "GRPC_WAITREAD_END"];
        array.write({ id, timestamps: [{ name: start, ns: Math.round(received.startNs) }] });
        array.write({ id, timestamps: [{ name: end, ns: Math.round(received.endNs) }] });
      }
      const stamps: [string, number][] =
        timeline === undefined
          ? [
              ["REQUEST_START", startNs],
              ["QUEUE_START", startNs],
              ["REQUEST_END", startNs + record.totalNs],
            ]
          : [
              ["REQUEST_START", startNs],
              ["QUEUE_START", startNs],
              ["COMPUTE_START", timeline.computeStartNs],
              ["COMPUTE_INPUT_END", timeline.computeInputEndNs],
              ["COMPUTE_OUTPUT_START", timeline.computeOutputStartNs],
              ["COMPUTE_END", timeline.endNs],
              ["REQUEST_END", timeline.endNs],
            ];
      for (const [name, ns] of stamps) array.write({ id, timestamps: [{ name, ns: Math.round(ns) }] });
    }
    if (setting.level.tensors) {
      const tensors: [string, string, Tensor][] = [];
      for (const [name, tensor] of inputs ?? record.request.inputs)
        tensors.push(["TENSOR_QUEUE_INPUT", name, tensor]);
      for (const [name, tensor] of record.outputs ?? [])
        tensors.push(["TENSOR_BACKEND_OUTPUT", name, tensor]);
      for (const [activity, name, tensor] of tensors) {
        array.write({
          id,
          activity,
          tensor: { name, data: tensorText(tensor), shape: tensor.shape.join(","), dtype: tensor.datatype },
        });
      }
    }
  };

  return {
    record(setting, model, version, record: RequestRecord, inputs?: ReadonlyMap<string, Tensor>): void {
      if (closed) return;
      // While the disk is far behind, a trace is dropped and no file is opened for it (with
      // a log frequency of 1 every request would open one); it still counts toward a part
      // already open. A trace whose file fails is dropped and counts too, so a count that
      // runs out, or a log frequency, ends the part (and a failed part gives way to a new file).
      const backlogged = pendingBytes() >= maxPendingBytes;
      const array = backlogged ? parts.get(setting) : arrayFor(setting);
      if (array === undefined) return;
      if (!array.failed && !backlogged) writeTrace(array, setting, model, version, record, inputs);
      if (array === main) return;
      array.traces++;
      const full = setting.logFrequency > 0 && array.traces === setting.logFrequency;
      // A request picked under a setting since retired still writes its trace: to a part
      // of its own, closed at once, as nothing else will close it.
      if (full || (setting.limited && setting.count === 0) || retired.has(setting)) endPart(setting);
    },
    retire(setting): void {
      retired.add(setting);
      endPart(setting);
    },
    async close(): Promise<void> {
      closed = true;
      for (const setting of [...parts.keys()]) endPart(setting);
      if (main !== undefined) finish(main);
      main = undefined;
      await Promise.all(ending.values());
    },
  };
}
