import { parentPort } from "node:worker_threads";
import { ServerError } from "../../core/errors.ts";
import { mayHaveSequenceIdNotInteger } from "../common/json-source-text.ts";
import { parseRequestJson } from "../common/json-syntax.ts";
import { flattenLeaves } from "../common/kserve/json-tensor.ts";
import { packRestTensors, parseRestJsonBody } from "../tfs/rest-json.ts";
import type { ParseFindings, ParseForm, ParseRequest, ThreadReply, WriteRequest } from "./json-thread.ts";
import { type PackedLeaves, packedBuffers, packLeaves, packNested } from "./packed-json.ts";
import { partsText } from "./write-parts.ts";

// The JSON thread (json-thread.ts). Beside the parse, it does what would otherwise cost
// the main thread as much again: the tensors' data are packed (packed-json.ts) and moved,
// not copied, and what the main thread would read again from the text is looked for here
// (a KServe `sequence_id` written as a fraction). A response body is written here whole,
// and goes back as UTF-8 bytes (moved).

/** How deep a bare array is packed (deeper ones are read on the main thread, unpacked). */
const MAX_ARRAY_RANK = 64;

const isObject = (value: unknown): value is Record<string, unknown> =>
  typeof value === "object" && value !== null && !Array.isArray(value);

/** KServe: each input's `data`, flat or nested, as its packed leaves. */
function packInferInputs(object: unknown, packed: (leaves: PackedLeaves) => void): void {
  if (!isObject(object) || !Array.isArray(object.inputs)) return;
  for (const input of object.inputs) {
    if (!isObject(input) || !Array.isArray(input.data)) continue;
    const leaves = packLeaves(Array.isArray(input.data[0]) ? flattenLeaves(input.data) : input.data);
    if (leaves === undefined) continue;
    input.data = leaves;
    packed(leaves);
  }
}

interface Parsed {
  readonly object: unknown;
  readonly findings: ParseFindings;
}

const PARSERS: Readonly<Record<ParseForm, (text: string, packed: (leaves: PackedLeaves) => void) => Parsed>> =
  {
    kserve(text, packed) {
      const object = parseRequestJson(text);
      packInferInputs(object, packed);
      return { object, findings: { sequenceIdsAreIntegers: !mayHaveSequenceIdNotInteger(text) } };
    },
    tfs(text, packed) {
      const { json } = parseRestJsonBody(text);
      packRestTensors(json, packed);
      return { object: json, findings: {} };
    },
    array(text, packed) {
      const object = parseRequestJson(text);
      const array = packNested(object, MAX_ARRAY_RANK);
      if (array !== undefined) packed(array.leaves);
      return { object: array ?? object, findings: {} };
    },
  };

function parse(request: ParseRequest, transfer: ArrayBuffer[]): ThreadReply {
  const { id, buffer, byteOffset, length } = request;
  const text = Buffer.from(buffer, byteOffset, length).toString("utf8");
  const { object, findings } = PARSERS[request.form](text, (leaves) =>
    transfer.push(...packedBuffers(leaves)),
  );
  return { id, buffer, object, findings };
}

function write(request: WriteRequest, transfer: ArrayBuffer[]): ThreadReply {
  const bytes = new TextEncoder().encode(partsText(request.parts));
  transfer.push(bytes.buffer as ArrayBuffer);
  return { id: request.id, buffer: bytes.buffer as ArrayBuffer, written: bytes.byteLength };
}

const failureOf = (error: unknown): string => (error instanceof Error ? error.message : String(error));

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
        : { id: request.id, buffer: body, failure: failureOf(error) };
  }
  if (request.type === "parse") transfer.push(body);
  try {
    parentPort!.postMessage(reply, transfer);
  } catch (error) {
    // The reply could not be cloned (a value nested deeper than the cloner's stack): the
    // request fails alone, and the thread goes on.
    parentPort!.postMessage(
      { id: request.id, buffer: body, failure: failureOf(error) } satisfies ThreadReply,
      request.type === "parse" ? [body] : [],
    );
  }
});
