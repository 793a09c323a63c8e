import { invalidArg } from "../../../core/errors.ts";
import type { SequenceId } from "../../../core/infer.ts";
import { toJsonText } from "../../common/http/json-text.ts";

// How inference travels in WebSocket messages. A binary message is the binary tensor
// extension's body with its header length in front instead of in an HTTP header:
//
//   [uint32 little-endian JSON length][JSON inference header][raw tensor bytes]
//
// Responses to binary messages are framed the same way; a text message is a KServe JSON
// request and is answered with JSON text. Errors and sequence control are small JSON texts.

/** Bytes of the length prefix. */
export const FRAME_PREFIX_BYTES = 4;

export interface Frame {
  /** Bytes of JSON at the start of `body` (0: `body` is the raw bytes of the model's only input). */
  readonly headerLength: number;
  /** The message without its prefix (a view, not a copy). */
  readonly body: Buffer;
}

export function readFrame(message: Buffer): Frame {
  if (message.byteLength < FRAME_PREFIX_BYTES) {
    throw invalidArg(
      `a binary message starts with the 4-byte little-endian length of its JSON header, but this one has ${message.byteLength} bytes`,
    );
  }
  const headerLength = message.readUInt32LE(0);
  const body = message.subarray(FRAME_PREFIX_BYTES);
  if (headerLength > body.byteLength) {
    throw invalidArg(
      `the message's JSON header length is ${headerLength} bytes, but only ${body.byteLength} bytes follow its prefix`,
    );
  }
  return { headerLength, body };
}

/** Writes the prefix into the bytes a response body reserved for it. */
export function writeFramePrefix(body: Buffer, headerLength: number): Buffer {
  body.writeUInt32LE(headerLength, 0);
  return body;
}

/** `{"error": …, "id": …}`; the id only when the request had one. */
export function errorText(message: string, requestId: string): string {
  const id = requestId === "" ? "" : `,"id":${JSON.stringify(requestId)}`;
  return `{"error":${JSON.stringify(message)}${id}}`;
}

/** The answer to the end message; a uint64 id is written with its exact digits. */
export function endText(id: SequenceId | undefined): string {
  return toJsonText(id === undefined ? { sequence_end: true } : { sequence_end: true, sequence_id: id });
}

/** The end message: `{"sequence_end": true}` with no inputs. */
export function isEndMessage(json: Readonly<Record<string, unknown>>): boolean {
  return json.inputs === undefined && json.sequence_end === true;
}

/** A close frame's reason is at most 123 bytes of UTF-8. */
export function closeReason(text: string): string {
  if (Buffer.byteLength(text) <= 123) return text;
  let cut = text.slice(0, 120);
  while (Buffer.byteLength(cut) > 120) cut = cut.slice(0, -1);
  return `${cut}…`;
}
