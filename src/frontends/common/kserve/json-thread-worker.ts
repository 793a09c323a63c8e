import { parentPort } from "node:worker_threads";
import { ServerError } from "../../../core/errors.ts";
import { mayHaveSequenceIdNotInteger } from "../json-source-text.ts";
import { parseRequestJson } from "../json-syntax.ts";
import { flattenLeaves, jsonTensorData, packStrings, type StringLeaves } from "./json-tensor.ts";
import type { ParseRequest, ThreadReply, WriteRequest } from "./json-thread.ts";

// The JSON thread (json-thread.ts). Beside the parse, it does what would otherwise cost
// the main thread as much again: each input's `data` whose leaves are all numbers goes
// back as one Float64Array of them, or all strings as one buffer of their UTF-8 bytes
// (moved, not copied), and the first look for a `sequence_id` written as a fraction is
// made here. A response body is written here whole, and goes back as UTF-8 bytes (moved).

/** Smaller arrays are sent as they are: copying them costs less than the typed array. */
const MIN_LEAVES = 256;

/**
 * The leaves of `data` (flat or nested, row-major) packed for the move back: all numbers
 * that JSON.parse read exactly as one Float64Array (integers past 2^53 are left to be read
 * again from the text), all strings as their UTF-8 bytes in one buffer; otherwise undefined.
 */
function packedLeaves(data: readonly unknown[]): Float64Array | StringLeaves | undefined {
  const leaves = Array.isArray(data[0]) ? flattenLeaves(data) : data;
  if (leaves.length < MIN_LEAVES) return undefined;
  if (typeof leaves[0] === "string") {
    return leaves.every((value) => typeof value === "string") ? packStrings(leaves as string[]) : undefined;
  }
  for (const value of leaves) {
    if (typeof value !== "number" || (Number.isInteger(value) && !Number.isSafeInteger(value)))
      return undefined;
  }
  return Float64Array.from(leaves as readonly number[]);
}

const isObject = (value: unknown): value is Record<string, unknown> =>
  typeof value === "object" && value !== null && !Array.isArray(value);

function parse(request: ParseRequest, transfer: ArrayBuffer[]): ThreadReply {
  const { id, buffer, byteOffset, length } = request;
  const text = Buffer.from(buffer, byteOffset, length).toString("utf8");
  const object = parseRequestJson(text);
  if (isObject(object) && Array.isArray(object.inputs)) {
    for (const input of object.inputs) {
      if (!isObject(input) || !Array.isArray(input.data)) continue;
      const packed = packedLeaves(input.data);
      if (packed === undefined) continue;
      input.data = packed;
      if (packed instanceof Float64Array) transfer.push(packed.buffer as ArrayBuffer);
      else transfer.push(packed.utf8.buffer as ArrayBuffer, packed.ends.buffer as ArrayBuffer);
    }
  }
  return { id, buffer, object, sequenceIdsAreIntegers: !mayHaveSequenceIdNotInteger(text) };
}

function write(request: WriteRequest, transfer: ArrayBuffer[]): ThreadReply {
  let text = "";
  for (const part of request.parts) text += typeof part === "string" ? part : jsonTensorData(part);
  const bytes = new TextEncoder().encode(text);
  transfer.push(bytes.buffer as ArrayBuffer);
  return { id: request.id, buffer: bytes.buffer as ArrayBuffer, written: bytes.byteLength };
}

parentPort!.on("message", (request: ParseRequest | WriteRequest) => {
  // A parse request's body goes back whatever happens: the main thread's Buffer is empty.
  const body = request.type === "parse" ? request.buffer : new ArrayBuffer(0);
  const transfer: ArrayBuffer[] = [];
  let reply: ThreadReply;
  try {
    reply = request.type === "parse" ? parse(request, transfer) : write(request, transfer);
  } catch (error) {
    transfer.length = 0;
    reply =
      error instanceof ServerError
        ? { id: request.id, buffer: body, refusal: error.message }
        : { id: request.id, buffer: body, failure: error instanceof Error ? error.message : String(error) };
  }
  if (request.type === "parse") transfer.push(body);
  parentPort!.postMessage(reply, transfer);
});
