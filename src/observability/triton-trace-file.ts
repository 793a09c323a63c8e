import { createWriteStream, mkdirSync, type WriteStream } from "node:fs";
import { dirname } from "node:path";
import type { TraceSettings } from "../config/trace-config.ts";
import type { RequestObserver, RequestRecord } from "../core/scheduler/request-observer.ts";
import type { Tensor } from "../core/tensor.ts";
import { requestTimeline } from "./request-timeline.ts";
import type { TraceSampler } from "./trace-sampler.ts";

// Triton's own trace output (`--trace-config triton,file=<path>`): a JSON array with, per
// traced request, an entry naming the model and the request, one entry per timestamp
// (level TIMESTAMPS), and one per input and output tensor (level TENSORS). Entries are
// streamed to the file as requests are traced, so memory does not grow with the trace;
// with `log-frequency` N, every N traces close `<file>.<i>` and start the next, as Triton
// does. Timestamps are nanoseconds of a monotonic clock, as Triton's steady clock.

export interface TritonTraceFile {
  observeRequests(model: string, version: string): RequestObserver;
  /** Closes the array and the file. */
  close(): Promise<void>;
}

function tensorText(tensor: Tensor): string {
  const data = tensor.data as ArrayLike<unknown>;
  const parts: string[] = [];
  for (let i = 0; i < data.length; i++) parts.push(String(data[i]));
  return parts.join(",");
}

export function tritonTraceFile(settings: TraceSettings, sampler: TraceSampler): TritonTraceFile {
  const path = settings.file!;
  mkdirSync(dirname(path), { recursive: true });
  let stream: WriteStream | undefined;
  let part = 0;
  let tracesInPart = 0;
  let nextId = 1;
  let first = true;

  const open = (): WriteStream => {
    if (stream === undefined) {
      stream = createWriteStream(settings.logFrequency > 0 ? `${path}.${part}` : path);
      stream.write("[");
      first = true;
    }
    return stream;
  };
  const finish = (): Promise<void> => {
    const done = stream;
    stream = undefined;
    if (done === undefined) return Promise.resolve();
    return new Promise((resolve) => done.end("\n]\n", () => resolve()));
  };
  const write = (entry: unknown): void => {
    open().write(`${first ? "\n" : ",\n"}${JSON.stringify(entry)}`);
    first = false;
  };

  return {
    observeRequests(model, version) {
      return {
        requestDone(record: RequestRecord): void {
          if (!sampler.pick(record.request.trace !== undefined)) return;
          const id = nextId++;
          write({ id, model_name: model, model_version: Number(version), request_id: record.request.id });
          if (settings.timestamps) {
            const timeline = requestTimeline(record);
            const startNs = record.arrivalNs;
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
            for (const [name, ns] of stamps) write({ id, timestamps: [{ name, ns: Math.round(ns) }] });
          }
          if (settings.tensors) {
            const tensors: [string, string, Tensor][] = [];
            for (const [name, tensor] of record.request.inputs)
              tensors.push(["TENSOR_QUEUE_INPUT", name, tensor]);
            for (const [name, tensor] of record.outputs ?? [])
              tensors.push(["TENSOR_BACKEND_OUTPUT", name, tensor]);
            for (const [activity, name, tensor] of tensors) {
              write({
                id,
                activity,
                tensor: {
                  name,
                  data: tensorText(tensor),
                  shape: tensor.shape.join(","),
                  dtype: tensor.datatype,
                },
              });
            }
          }
          if (settings.logFrequency > 0 && ++tracesInPart === settings.logFrequency) {
            tracesInPart = 0;
            part++;
            void finish();
          }
        },
      };
    },
    close: finish,
  };
}
