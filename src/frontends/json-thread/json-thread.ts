import type { Worker } from "node:worker_threads";
import { siblingModule, spawnWorker } from "../../backends/worker/spawn-worker.ts";
import { type ErrorCode, type ErrorReason, internal, ServerError } from "../../core/errors.ts";
import type { Tensor } from "../../core/tensor.ts";
import { bodyText, parseBody } from "./body-parsers.ts";

// Large JSON bodies, of every family that takes them (KServe over HTTP and WebSocket,
// TF-Serving's REST API, SageMaker's invocations), are read and written on a thread of
// their own. JSON.parse of a body of numbers runs at about 30 MB/s here (a double made per
// element), and writing floats about as fast, so on the event loop a 50 MB body held every
// other request and sequence for seconds. On this thread, the main thread only moves
// memory: a request body goes over and back (no copy) and its tensors' data come back
// packed, one typed array each (packed-json.ts); a response's tensors go over (copied:
// others may still read them) and its body comes back as UTF-8 bytes. A value that would
// cost more to send back than to parse (json-thread-worker.ts) is parsed here after all.
// The thread starts with the first large body and ends after a while without one, so a
// server that never gets one never pays for it.

/** JSON parts this long or longer are parsed off the event loop (shorter: in place, ~30 ms at most). */
export const OFF_THREAD_JSON_BYTES = 1 << 20;
/** Responses with this many JSON elements or more are written off the event loop (~10 ms in place). */
export const OFF_THREAD_JSON_ELEMENTS = 1 << 16;
const IDLE_END_MS = 30_000;
/**
 * A thread whose heap has grown past this (a body of millions of values) ends as soon as
 * nothing waits on it, rather than keeping that memory for the idle time: the next large
 * body starts a new one.
 */
const LARGE_HEAP_BYTES = 256 * 2 ** 20;

/**
 * Which family's JSON a body holds, which says where its tensors' data are and how a
 * malformed body is refused: a KServe v2 inference request (data in `inputs[i].data`), a
 * TF-Serving REST predict request (`inputs` or `instances`, NaN and Infinity allowed), or
 * a bare array of one input's data (SageMaker).
 */
export type ParseForm = "kserve" | "tfs" | "array";

export interface ParseRequest {
  readonly type: "parse";
  readonly form: ParseForm;
  readonly id: number;
  readonly buffer: ArrayBuffer;
  readonly byteOffset: number;
  readonly length: number;
}

/**
 * A tensor written nested to its shape: as a bare JSON array (`nested`, SageMaker), or as
 * TF-Serving's REST lists (`rest`: TF-Serving's tokens for non-finite floats, bytes as
 * strings or `{"b64": …}` by `name`); `row`, when set, writes only that row of its first axis.
 */
export interface NestedTensor {
  readonly form: "nested" | "rest";
  readonly name: string;
  readonly tensor: Tensor;
  readonly row?: number;
}

/** A response body: JSON text, and tensors in between (a Tensor alone: its data flat, as KServe writes it). */
export type WritePart = string | Tensor | NestedTensor;

export interface WriteRequest {
  readonly type: "write";
  readonly id: number;
  readonly parts: readonly WritePart[];
}

interface Returned {
  readonly id: number;
  /** The request body's memory moved back, or the response body's bytes. */
  readonly buffer: ArrayBuffer;
}

/** What the thread found in a body's JSON beside its value. */
export interface ParseFindings {
  /** KServe: no `sequence_id` is written as a fraction (json-source-text.ts). */
  readonly sequenceIdsAreIntegers?: boolean;
  /** TF-Serving REST: no special input is written as a fraction (rest-json.ts). */
  readonly specialInputsAreIntegers?: boolean;
}

/** A ServerError as it crosses from the thread. */
export interface Refusal {
  readonly code: ErrorCode;
  readonly message: string;
  readonly reason: ErrorReason | undefined;
}

const refused = (refusal: Refusal): ServerError =>
  new ServerError(
    refusal.code,
    refusal.message,
    refusal.reason === undefined ? {} : { reason: refusal.reason },
  );

/**
 * The client's JSON refused by parseJsonOffThread, with the body given back in place of
 * the one given (its memory went to the thread and came back with the refusal): a caller
 * that reads a body which is not JSON another way still has its bytes.
 */
export class RefusedJson extends ServerError {
  readonly body: Buffer;

  constructor(refusal: Refusal, body: Buffer) {
    super(refusal.code, refusal.message, refusal.reason === undefined ? {} : { reason: refusal.reason });
    this.body = body;
  }
}

/** What the thread answers a request with. */
export type ThreadAnswer =
  | (Returned & { readonly object: unknown; readonly findings: ParseFindings })
  /** The value would cost more to send back than to parse here (too deep, or too many values unpacked). */
  | (Returned & { readonly parseInPlace: true })
  /** The client's JSON is malformed: the family's code and words for it. */
  | (Returned & { readonly refusal: Refusal })
  /** The thread could not do it for a reason of its own (memory). */
  | (Returned & { readonly failure: string })
  /** The response body written: its UTF-8 bytes, the first `written` of `buffer`. */
  | (Returned & { readonly written: number });

/** An answer, with the thread's heap as it answered (V8's total heap size), in bytes. */
type ThreadReply = ThreadAnswer & { readonly heapBytes: number };

interface Waiting {
  readonly resolve: (reply: ThreadReply) => void;
  readonly reject: (error: Error) => void;
}

const ENTRY = siblingModule(import.meta.url, "json-thread-worker");
let thread: Worker | undefined;
let idleTimer: NodeJS.Timeout | undefined;
let nextId = 0;
const waiting = new Map<number, Waiting>();
/** Bodies parsed and written on the thread so far. */
let handled = 0;

/** How many bodies the JSON thread has parsed or written in this process. */
export function jsonThreadBodies(): number {
  return handled;
}

function startThread(): Worker {
  const worker = spawnWorker(ENTRY);
  // It never keeps the process alive: the requests waiting on it do.
  worker.unref();
  worker.on("message", (reply: ThreadReply) => {
    const entry = waiting.get(reply.id);
    waiting.delete(reply.id);
    handled++;
    // A heap grown large goes before its request goes on (which may parse its body again).
    if (waiting.size === 0 && reply.heapBytes > LARGE_HEAP_BYTES) endNow(worker);
    entry?.resolve(reply);
    if (waiting.size === 0) endWhenIdle(worker, IDLE_END_MS);
  });
  const stopped = (why: string) => {
    // A thread let go when idle had nothing waiting on it; what waits now is a later one's.
    if (thread !== worker) return;
    thread = undefined;
    for (const entry of waiting.values()) entry.reject(internal(`the JSON thread stopped: ${why}`));
    waiting.clear();
  };
  // A reply this thread cannot read (the worker answers in order: the oldest waiting's)
  // fails that request alone. Replies too deep to read are not sent (json-thread-worker.ts);
  // this is the backstop.
  worker.on("messageerror", (error) => {
    const [id, entry] = waiting.entries().next().value ?? [];
    if (id === undefined) return;
    waiting.delete(id);
    entry?.reject(internal(`the JSON thread's answer could not be read: ${error.message}`));
    if (waiting.size === 0) endWhenIdle(worker, IDLE_END_MS);
  });
  worker.on("error", (error) => stopped(error.message));
  worker.on("exit", (code) => stopped(`exit code ${code}`));
  return worker;
}

/** The end of the last thread let go, while its memory is being given back. */
let ending: Promise<unknown> = Promise.resolve();

function endNow(worker: Worker): void {
  if (thread !== worker) return;
  thread = undefined;
  ending = worker.terminate();
}

function endWhenIdle(worker: Worker, afterMs: number): void {
  clearTimeout(idleTimer);
  idleTimer = setTimeout(() => {
    if (waiting.size === 0) endNow(worker);
  }, afterMs).unref();
}

function ask(message: ParseRequest | WriteRequest, transfer: ArrayBuffer[]): Promise<ThreadReply> {
  clearTimeout(idleTimer);
  thread ??= startThread();
  const worker = thread;
  return new Promise<ThreadReply>((resolve, reject) => {
    waiting.set(message.id, { resolve, reject });
    worker.postMessage(message, transfer);
  });
}

export interface ParsedOffThread extends ParseFindings {
  /** The parsed JSON, its tensors' data packed (packed-json.ts). */
  readonly value: unknown;
  /** The JSON text, decoded when first read (only 64-bit integers past 2^53 need it). */
  readonly text: string;
  /** The body, in place of the one given. */
  readonly body: Buffer;
}

/**
 * The first `jsonLength` bytes of `body` parsed as JSON of `form`, on the JSON thread,
 * and `body` again: its memory is moved there and back, so the Buffer given is emptied
 * and the one returned takes its place. `body` must own its memory (a request body as
 * readRequestBody gives it); binary inputs after the JSON stay in it.
 */
export async function parseJsonOffThread(
  body: Buffer,
  jsonLength: number,
  form: ParseForm,
): Promise<ParsedOffThread> {
  const { buffer, byteOffset, byteLength } = body;
  const message: ParseRequest = {
    type: "parse",
    form,
    id: nextId++,
    buffer: buffer as ArrayBuffer,
    byteOffset,
    length: jsonLength,
  };
  const reply = await ask(message, [buffer as ArrayBuffer]);
  const returned = Buffer.from(reply.buffer, byteOffset, byteLength);
  if ("refusal" in reply) throw new RefusedJson(reply.refusal, returned);
  if ("failure" in reply) throw internal(`the request JSON could not be parsed: ${reply.failure}`);
  if ("parseInPlace" in reply) {
    // The thread's copy of this value is let go first (its heap, if it grew large).
    await ending;
    try {
      return parsedInPlace(returned, jsonLength, form);
    } catch (error) {
      if (!(error instanceof ServerError)) throw error;
      throw new RefusedJson(error, returned);
    }
  }
  let text: string | undefined;
  if (!("object" in reply)) throw internal("the JSON thread answered a parse with a body");
  return {
    value: reply.object,
    ...reply.findings,
    get text() {
      text ??= returned.toString("utf8", 0, jsonLength);
      return text;
    },
    body: returned,
  };
}

/** The first `jsonLength` bytes of `body` parsed as JSON of `form` here, on the calling thread. */
function parsedInPlace(body: Buffer, jsonLength: number, form: ParseForm): ParsedOffThread {
  const text = bodyText(form, body, jsonLength);
  const { object, findings } = parseBody(form, text);
  return { value: object, ...findings, text, body };
}

/**
 * The first `jsonLength` bytes of `body` parsed as JSON of `form`: in place below
 * OFF_THREAD_JSON_BYTES, on the JSON thread from there (a promise only then: an await on
 * every request costs throughput, see decodeInferRequestOffThread). `body` as for
 * parseJsonOffThread.
 */
export function parseJson(
  body: Buffer,
  jsonLength: number,
  form: ParseForm,
): ParsedOffThread | Promise<ParsedOffThread> {
  if (jsonLength < OFF_THREAD_JSON_BYTES) return parsedInPlace(body, jsonLength, form);
  return parseJsonOffThread(body, jsonLength, form);
}

/** A response body of `parts`, written on the JSON thread, as UTF-8 bytes. */
export async function writeJsonOffThread(parts: readonly WritePart[]): Promise<Buffer> {
  const transfer: ArrayBuffer[] = [];
  // A copy of each tensor's data, once however many parts write it: the model's output
  // may share its memory, and others read it.
  const copies = new Map<Tensor, Tensor>();
  const copy = (tensor: Tensor): Tensor => {
    let copied = copies.get(tensor);
    if (copied === undefined) {
      if (!ArrayBuffer.isView(tensor.data)) copied = tensor;
      else {
        const data = tensor.data.slice();
        transfer.push(data.buffer as ArrayBuffer);
        copied = { ...tensor, data } as Tensor;
      }
      copies.set(tensor, copied);
    }
    return copied;
  };
  const sent = parts.map((part): WritePart => {
    if (typeof part === "string") return part;
    return "form" in part ? { ...part, tensor: copy(part.tensor) } : copy(part);
  });
  const reply = await ask({ type: "write", id: nextId++, parts: sent }, transfer);
  if ("failure" in reply) throw internal(`the response JSON could not be written: ${reply.failure}`);
  if ("refusal" in reply) throw refused(reply.refusal);
  if (!("written" in reply)) throw internal("the JSON thread answered a write with a parse");
  return Buffer.from(reply.buffer, 0, reply.written);
}
