import { type FileHandle, open } from "node:fs/promises";
import { invalidArg } from "../../core/errors.ts";

// An ONNX model's graph description (GraphProto.doc_string, what ONNX Runtime's
// GetGraphDescription returns), read from the model file. Triton's ONNX stateful backend
// finds a model's state pairs there when its config names none (see
// config/resolve/graph-description-pairs.ts). onnxruntime-node does not expose the
// description, and protobufjs decodes from memory: this walks the file's protobuf fields
// instead, reading tags and lengths and skipping the rest, so a model of 2 GB (nodes,
// initializers) is never held whole for a string of a few lines.

/** ModelProto.graph and GraphProto.doc_string (onnx.proto). */
const MODEL_GRAPH = 7;
const GRAPH_DOC_STRING = 10;

const WIRE_VARINT = 0;
const WIRE_FIXED64 = 1;
const WIRE_LENGTH_DELIMITED = 2;
const WIRE_FIXED32 = 5;

/**
 * A description is a few lines; one longer than this is refused rather than made into a
 * string (V8's strings stop at 2^29 characters; a 2 GB model file could hold more).
 */
export const MAX_GRAPH_DESCRIPTION_BYTES = 64 << 20;

const WINDOW_BYTES = 64 << 10;

/** A window onto the file, moved as the walk goes: small fields are read from it without a read each. */
class FileWindow {
  readonly #file: FileHandle;
  readonly #buffer = Buffer.allocUnsafe(WINDOW_BYTES);
  #start = 0;
  #length = 0;

  constructor(file: FileHandle) {
    this.#file = file;
  }

  /** Bytes [position, position + count) (fewer at the file's end), valid until the next call. */
  async bytes(position: number, count: number): Promise<Uint8Array> {
    if (position < this.#start || position + count > this.#start + this.#length) {
      const { bytesRead } = await this.#file.read(this.#buffer, 0, WINDOW_BYTES, position);
      this.#start = position;
      this.#length = bytesRead;
    }
    const from = position - this.#start;
    return this.#buffer.subarray(from, Math.min(from + count, this.#length));
  }
}

interface Field {
  readonly number: number;
  readonly wireType: number;
  /** Where the field's value starts (for a length-delimited field, its first byte). */
  readonly valueAt: number;
  /** Its length: the bytes of a length-delimited field, else 0. */
  readonly length: number;
  /** Where the next field starts. */
  readonly next: number;
}

class NotOnnx extends Error {}

/** A varint at `position`: its value and the position after it. */
async function varint(window: FileWindow, position: number, end: number): Promise<[number, number]> {
  const bytes = await window.bytes(position, 10);
  let value = 0;
  for (let i = 0; i < bytes.length && position + i < end; i++) {
    const byte = bytes[i]!;
    value += (byte & 0x7f) * 2 ** (7 * i);
    if ((byte & 0x80) === 0) return [value, position + i + 1];
  }
  throw new NotOnnx();
}

/** The field starting at `position`, which must end by `end`. */
async function fieldAt(window: FileWindow, position: number, end: number): Promise<Field> {
  const [tag, afterTag] = await varint(window, position, end);
  const number = Math.floor(tag / 8);
  const wireType = tag % 8;
  let valueAt = afterTag;
  let length = 0;
  let next: number;
  if (wireType === WIRE_VARINT) next = (await varint(window, afterTag, end))[1];
  else if (wireType === WIRE_FIXED64) next = afterTag + 8;
  else if (wireType === WIRE_FIXED32) next = afterTag + 4;
  else if (wireType === WIRE_LENGTH_DELIMITED) {
    [length, valueAt] = await varint(window, afterTag, end);
    next = valueAt + length;
  } else throw new NotOnnx(); // groups, which onnx.proto has none of
  if (number === 0 || next > end) throw new NotOnnx();
  return { number, wireType, valueAt, length, next };
}

/** The fields of the message in [start, end), one by one. */
async function* fields(window: FileWindow, start: number, end: number): AsyncGenerator<Field> {
  for (let position = start; position < end; ) {
    const field = await fieldAt(window, position, end);
    yield field;
    position = field.next;
  }
}

/**
 * The graph description of the ONNX model in `path`: "" when it has none. As protobuf
 * reads a message, the last doc_string written wins, over every `graph` field. Throws
 * INVALID_ARG when the file is not an ONNX model (or is cut short) or the description is
 * longer than MAX_GRAPH_DESCRIPTION_BYTES.
 */
export async function readGraphDescription(path: string): Promise<string> {
  const file = await open(path, "r");
  try {
    const size = (await file.stat()).size;
    const window = new FileWindow(file);
    let description: Field | undefined;
    for await (const field of fields(window, 0, size)) {
      if (field.number !== MODEL_GRAPH || field.wireType !== WIRE_LENGTH_DELIMITED) continue;
      for await (const graphField of fields(window, field.valueAt, field.next)) {
        if (graphField.number === GRAPH_DOC_STRING && graphField.wireType === WIRE_LENGTH_DELIMITED)
          description = graphField;
      }
    }
    if (description === undefined) return "";
    if (description.length > MAX_GRAPH_DESCRIPTION_BYTES) {
      throw invalidArg(
        `the graph description of '${path}' has ${description.length} bytes, more than the ${MAX_GRAPH_DESCRIPTION_BYTES} read for state pairs`,
      );
    }
    const text = Buffer.allocUnsafe(description.length);
    await file.read(text, 0, description.length, description.valueAt);
    return text.toString("utf8");
  } catch (error) {
    if (error instanceof NotOnnx)
      throw invalidArg(`'${path}' is not an ONNX model: its protobuf fields do not parse`);
    throw error;
  } finally {
    await file.close();
  }
}
