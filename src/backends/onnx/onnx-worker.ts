import { readdirSync, type Stats, statSync } from "node:fs";
import { dirname } from "node:path";
import { parentPort } from "node:worker_threads";
import { Tensor } from "onnxruntime-node";
import type { NumericArray } from "../../core/datatype.ts";
import type { ErrorCode } from "../../core/errors.ts";
import type { ModelIo, ModelTensorInfo } from "../../core/model-io.ts";
import {
  type ErrorMessage,
  type FromWorkerMessage,
  instanceNameOf,
  type LoadMessage,
  type RunMessage,
  type ToWorkerMessage,
} from "../worker/messages.ts";
import { type PackedBytes, transferableArray, type WireTensor } from "../worker/wire-tensor.ts";
import { digestOfSync, sameFile } from "./model-file-identity.ts";
import { datatypeOfOrtType, elementType, type OrtTensorType, ortTensorType } from "./onnx-types.ts";
import { type Binding, binding, initOrt } from "./ort-binding.ts";

// A worker thread hosting ONNX model instances: an ONNX Runtime session per instance, or
// one for all the instances here whose sessions would be the same (see sharing()),
// answering runs in the order they arrive. session.run() blocks this thread, which is the
// point: the main thread's event loop never waits for a model. Instances that share a
// worker take turns (model-hosts.ts decides which do).

if (parentPort === null) throw new Error("onnx-worker.ts runs as a worker thread");
const port = parentPort;

/** A failure with the status class the main thread should report. */
class RunFailure extends Error {
  readonly code: ErrorCode;
  constructor(code: ErrorCode, message: string) {
    super(message);
    this.code = code;
  }
}

interface LoadedSession {
  readonly session: Binding.InferenceSession;
  readonly io: ModelIo;
  readonly inputNames: ReadonlySet<string>;
  readonly outputNames: ReadonlySet<string>;
  /** Fetched when a run asks for no output: ONNX Runtime runs nothing without one. */
  readonly anyOutput: string;
  /** Its key among the shared sessions, if it may be shared. */
  readonly sharedAs: string | undefined;
  /** How many instances hold it. */
  holders: number;
}

/** Each instance's session, by instance key. */
const sessions = new Map<string, LoadedSession>();
/** Sessions that instances with the same session key share (session-keys.ts says which may). */
const shared = new Map<string, LoadedSession>();
const RUN_OPTIONS = {};
// Fatal: ONNX Runtime's Node.js API takes string tensors as JavaScript strings, so bytes
// that are not UTF-8 cannot reach the model unchanged; they are refused, never altered.
const utf8Decoder = new TextDecoder("utf-8", { fatal: true });
const utf8Encoder = new TextEncoder();

function post(message: FromWorkerMessage, transfer?: ArrayBuffer[]): void {
  port.postMessage(message, transfer);
}

/**
 * ONNX Runtime's checks name the C++ file, line and function that failed
 * ("/onnxruntime_src/…/element_wise_ops.h:563 void onnxruntime::BroadcastIterator::Init(…) "):
 * of no use to a client, and a view into the server's build. The rest of the message
 * (what failed, and why) is kept.
 */
const SOURCE_LOCATION = /\S*\.(?:h|hh|hpp|c|cc|cpp|cxx):\d+\s+(?:[\w:<>,*&~ ]*\([^()]*\)\s*(?:const\s+)?)?/g;

function errorText(error: unknown): string {
  return (error instanceof Error ? error.message : String(error)).replace(SOURCE_LOCATION, "").trim();
}

function tensorInfo(metadata: Binding.ValueMetadata): ModelTensorInfo {
  if (!metadata.isTensor) {
    return { name: metadata.name, datatype: undefined, typeName: "non-tensor", shape: undefined };
  }
  const type = elementType(metadata.type);
  // ONNX Runtime reports a symbolic or unknown dimension as -1. It reports a value of
  // unknown rank with no dimensions, the same as a scalar.
  return {
    name: metadata.name,
    datatype: type.datatype,
    typeName: type.name,
    shape: metadata.shape.map((dim) => (dim < 0 ? -1 : dim)),
  };
}

/**
 * The key under which `message`'s session may be shared on this thread. A file alone in
 * its folder is shared by what it holds: its bytes, hashed here, with the session options
 * (never by what its name or dates suggest). Any other file (external data may sit beside
 * it) only by the instances of one load: the main thread's key.
 */
function sharing(message: LoadMessage): { key: string | undefined; hashed: Stats | undefined } {
  const { modelPath, sessionKey } = message;
  if (sessionKey === undefined) return { key: undefined, hashed: undefined };
  let alone = false;
  try {
    alone = readdirSync(dirname(modelPath)).length === 1;
  } catch {}
  if (!alone) return { key: sessionKey, hashed: undefined };
  try {
    const hashed = statSync(modelPath);
    const key = `sha256:${digestOfSync(modelPath)} ${JSON.stringify(message.sessionOptions)}`;
    return { key, hashed };
  } catch {
    // Not readable: ONNX Runtime's load says why, naming the file.
    return { key: undefined, hashed: undefined };
  }
}

function load(message: LoadMessage): void {
  const { instanceKey } = message;
  try {
    const sharable = sharing(message);
    let { key } = sharable;
    let loaded = key === undefined ? undefined : shared.get(key);
    const sharesSession = loaded !== undefined;
    if (loaded === undefined) {
      initOrt();
      const session = new binding.InferenceSession();
      session.loadModel(message.modelPath, { ...message.sessionOptions });
      // A file written between its hashing and ONNX Runtime's read: the session holds
      // bytes other than the ones hashed, so it is this instance's alone.
      if (sharable.hashed !== undefined && !sameFile(statSync(message.modelPath), sharable.hashed))
        key = undefined;
      const io = {
        inputs: session.inputMetadata.map(tensorInfo),
        outputs: session.outputMetadata.map(tensorInfo),
      };
      loaded = {
        session,
        io,
        inputNames: new Set(io.inputs.map((i) => i.name)),
        outputNames: new Set(io.outputs.map((o) => o.name)),
        anyOutput: io.outputs[0]?.name ?? "",
        sharedAs: key,
        holders: 0,
      };
      if (key !== undefined) shared.set(key, loaded);
    }
    loaded.holders++;
    sessions.set(instanceKey, loaded);
    post({ type: "loaded", instanceKey, io: loaded.io, sharesSession });
  } catch (error) {
    post({ type: "error", instanceKey, id: "load", code: "INTERNAL", message: errorText(error) });
  }
}

/** Lets go of `instanceKey`'s session, freeing it once no instance holds it. */
function release(instanceKey: string): void {
  const loaded = sessions.get(instanceKey);
  if (loaded === undefined) return;
  sessions.delete(instanceKey);
  if (--loaded.holders > 0) return;
  if (loaded.sharedAs !== undefined) shared.delete(loaded.sharedAs);
  loaded.session.dispose();
}

function decodeStrings(name: string, packed: PackedBytes): string[] {
  const { offsets, bytes } = packed;
  const strings: string[] = new Array(offsets.length - 1);
  for (let i = 0; i < strings.length; i++) {
    try {
      strings[i] = utf8Decoder.decode(bytes.subarray(offsets[i]!, offsets[i + 1]!));
    } catch {
      throw new RunFailure(
        "INVALID_ARG",
        `element ${i} of BYTES input '${name}' is not valid UTF-8, which ONNX Runtime string tensors require`,
      );
    }
  }
  return strings;
}

function encodeStrings(strings: readonly string[], transfer: ArrayBuffer[]): PackedBytes {
  const offsets = new Uint32Array(strings.length + 1);
  let total = 0;
  for (let i = 0; i < strings.length; i++) {
    total += Buffer.byteLength(strings[i]!, "utf8");
    offsets[i + 1] = total;
  }
  const bytes = new Uint8Array(total);
  for (let i = 0; i < strings.length; i++) utf8Encoder.encodeInto(strings[i]!, bytes.subarray(offsets[i]!));
  transfer.push(offsets.buffer, bytes.buffer);
  return { offsets, bytes };
}

function feed(input: WireTensor): Tensor {
  const type = ortTensorType(input.datatype);
  if (type === undefined) {
    throw new RunFailure(
      "INVALID_ARG",
      `input '${input.name}' has datatype ${input.datatype}, which ONNX Runtime for Node.js cannot feed`,
    );
  }
  const data =
    type === "string" ? decodeStrings(input.name, input.data as PackedBytes) : (input.data as NumericArray);
  // One constructor call for every type: the overloads only differ in the data they accept.
  return new Tensor(type as "float32", data as Float32Array, input.shape);
}

function fetched(name: string, value: unknown, transfer: ArrayBuffer[]): WireTensor {
  if (!(value instanceof Tensor)) {
    throw new RunFailure("INTERNAL", `output '${name}' is not a tensor`);
  }
  const datatype = datatypeOfOrtType(value.type);
  if (datatype === undefined) {
    throw new RunFailure("INTERNAL", `output '${name}' has type ${value.type}, which cannot be returned`);
  }
  if (datatype === "BYTES") {
    return { name, datatype, shape: value.dims, data: encodeStrings(value.data as string[], transfer) };
  }
  let data = value.data as NumericArray;
  // FP16 travels as bit patterns; a runtime with Float16Array may hand those out instead.
  if ((value.type as OrtTensorType) === "float16" && !(data instanceof Uint16Array)) {
    data = new Uint16Array(data.buffer, data.byteOffset, data.byteLength / 2);
  }
  return { name, datatype, shape: value.dims, data: transferableArray(data, transfer) };
}

// ONNX Runtime's INVALID_ARGUMENT failures of a run: the request does not fit the model.
const INVALID_ARGUMENT =
  /invalid dimensions|invalid rank|unexpected input data type|invalid (feed )?input name|missing input|invalid argument|size\(\d+\) does not match/i;

function runFailure(error: unknown): RunFailure {
  if (error instanceof RunFailure) return error;
  const text = errorText(error);
  return new RunFailure(
    INVALID_ARGUMENT.test(text) ? "INVALID_ARG" : "INTERNAL",
    `onnx runtime error: ${text}`,
  );
}

function run(message: RunMessage): void {
  const start = performance.now();
  // Behind the runs this worker held before it (the main thread keeps several with it).
  const waitNs = Math.max(0, performance.timeOrigin + start - message.postedAt) * 1e6;
  const { instanceKey } = message;
  try {
    const loaded = sessions.get(instanceKey);
    if (loaded === undefined)
      throw new RunFailure("UNAVAILABLE", `model instance '${instanceNameOf(instanceKey)}' is not loaded`);
    const { session, inputNames, outputNames, anyOutput } = loaded;

    const feeds: Record<string, Tensor> = Object.create(null);
    for (const input of message.inputs) {
      if (!inputNames.has(input.name)) {
        throw new RunFailure(
          "INVALID_ARG",
          `unexpected inference input '${input.name}', allowed inputs are: ${[...inputNames].join(", ")}`,
        );
      }
      feeds[input.name] = feed(input);
    }
    if (message.inputs.length !== inputNames.size) {
      for (const name of inputNames) {
        if (feeds[name] === undefined) throw new RunFailure("INVALID_ARG", `missing input '${name}'`);
      }
    }
    const fetches: Record<string, null> = Object.create(null);
    for (const name of message.outputNames) {
      if (!outputNames.has(name)) {
        throw new RunFailure(
          "INVALID_ARG",
          `unexpected inference output '${name}', allowed outputs are: ${[...outputNames].join(", ")}`,
        );
      }
      fetches[name] = null;
    }
    if (message.outputNames.length === 0) fetches[anyOutput] = null;

    const fed = performance.now();
    const results = session.run(feeds, fetches, RUN_OPTIONS);
    const inferred = performance.now();

    const transfer: ArrayBuffer[] = [];
    const outputs: WireTensor[] = new Array(message.outputNames.length);
    for (let i = 0; i < outputs.length; i++) {
      const name = message.outputNames[i]!;
      outputs[i] = fetched(name, results[name], transfer);
    }
    const done = performance.now();
    post(
      {
        type: "result",
        instanceKey,
        id: message.id,
        outputs,
        waitNs,
        inputNs: (fed - start) * 1e6,
        inferNs: (inferred - fed) * 1e6,
        outputNs: (done - inferred) * 1e6,
      },
      transfer,
    );
  } catch (error) {
    const failure = runFailure(error);
    const reply: ErrorMessage = {
      type: "error",
      instanceKey,
      id: message.id,
      code: failure.code,
      message: failure.message,
    };
    post(reply);
  }
}

function unload(instanceKey: string): void {
  release(instanceKey);
  post({ type: "unloaded", instanceKey });
}

function close(): void {
  for (const instanceKey of [...sessions.keys()]) release(instanceKey);
  port.close();
}

port.on("message", (message: ToWorkerMessage) => {
  switch (message.type) {
    case "load":
      return load(message);
    case "run":
      return run(message);
    case "unload":
      return unload(message.instanceKey);
    case "close":
      return close();
  }
});
