import { getHeapStatistics } from "node:v8";
import { parentPort } from "node:worker_threads";
import { ServerError } from "../../core/errors.ts";
import { bodyText, packBody, parseBody } from "./body-parsers.ts";
import type { ParseRequest, ThreadAnswer, WriteRequest } from "./json-thread.ts";
import { isPackedArray, isPackedRows, packedBuffers } from "./packed-json.ts";
import { partsText } from "./write-parts.ts";

// The JSON thread (json-thread.ts). Beside the parse, it does what would otherwise cost
// the main thread as much again: the tensors' data are packed (packed-json.ts) and moved,
// not copied, and what the main thread would read again from the text is looked for here
// (a KServe `sequence_id` written as a fraction). A value too large to send back cheaply
// is not sent: the main thread parses that body itself. No value is too deep to send (the
// main thread reads a message with a smaller stack than this thread writes it with, and
// about 3,000 levels failed there): bodies nested past MAX_JSON_DEPTH (json-depth.ts) are
// refused before they are parsed. A response body is written here whole, and goes back as
// UTF-8 bytes (moved).

/**
 * Most JSON values (objects, arrays, numbers, strings) sent back unpacked: rebuilding them
 * on the main thread costs it about what parsing them there does, and holds a second
 * copy; past this many, the body is parsed on the main thread.
 */
const MAX_SENT_VALUES = 1 << 18;

/** Whether `value` (packed where it could be) is cheap to send back, by MAX_SENT_VALUES. */
function cheapToSend(value: unknown): boolean {
  const stack: unknown[] = [value];
  let values = 0;
  while (stack.length > 0) {
    const item = stack.pop();
    if (++values > MAX_SENT_VALUES) return false;
    if (typeof item !== "object" || item === null || isPackedArray(item) || ArrayBuffer.isView(item))
      continue;
    if (isPackedRows(item)) continue;
    for (const member of Array.isArray(item) ? item : Object.values(item)) stack.push(member);
  }
  return true;
}

function parse(request: ParseRequest, transfer: ArrayBuffer[]): ThreadAnswer {
  const { id, buffer, byteOffset, length, form } = request;
  const text = bodyText(form, Buffer.from(buffer, byteOffset, length), length);
  const { object, findings } = parseBody(form, text);
  const value = packBody(form, object, (leaves) => transfer.push(...packedBuffers(leaves)));
  if (cheapToSend(value)) return { id, buffer, object: value, findings };
  transfer.length = 0;
  return { id, buffer, parseInPlace: true };
}

function write(request: WriteRequest, transfer: ArrayBuffer[]): ThreadAnswer {
  const bytes = new TextEncoder().encode(partsText(request.parts));
  transfer.push(bytes.buffer as ArrayBuffer);
  return { id: request.id, buffer: bytes.buffer as ArrayBuffer, written: bytes.byteLength };
}

const failureOf = (error: unknown): string => (error instanceof Error ? error.message : String(error));

/** Posts `answer` with the thread's heap size, so the main thread can end a thread grown large. */
function post(answer: ThreadAnswer, transfer: ArrayBuffer[]): void {
  parentPort!.postMessage({ ...answer, heapBytes: getHeapStatistics().total_heap_size }, transfer);
}

parentPort!.on("message", (request: ParseRequest | WriteRequest) => {
  // A parse request's body goes back whatever happens: the main thread's Buffer is empty.
  const body = request.type === "parse" ? request.buffer : new ArrayBuffer(0);
  const transfer: ArrayBuffer[] = [];
  let answer: ThreadAnswer;
  try {
    answer = request.type === "parse" ? parse(request, transfer) : write(request, transfer);
  } catch (error) {
    transfer.length = 0;
    answer =
      error instanceof ServerError
        ? {
            id: request.id,
            buffer: body,
            refusal: { code: error.code, message: error.message, reason: error.reason },
          }
        : { id: request.id, buffer: body, failure: failureOf(error) };
  }
  if (request.type === "parse") transfer.push(body);
  try {
    post(answer, transfer);
  } catch (error) {
    // The answer could not be cloned: the request fails alone, and the thread goes on.
    post({ id: request.id, buffer: body, failure: failureOf(error) }, request.type === "parse" ? [body] : []);
  }
});
