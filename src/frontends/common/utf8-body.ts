import { isUtf8 } from "node:buffer";

// A JSON body's bytes must be UTF-8 (RFC 8259). Decoded as they were, any that are not
// became U+FFFD, and a BYTES element the client sent reached the model as other bytes
// (ef bf bd), where the binary form refuses them. Triton's rapidjson passes such bytes
// through, which a JavaScript string cannot carry: the body is refused, saying where.
// isUtf8 (simdutf) reads a 16 KB body in about a microsecond; only a body it refuses is
// walked again, to find the byte.

/** Where the first byte of `bytes` that is not UTF-8 is; undefined when they all are. */
export function firstNotUtf8Byte(bytes: Uint8Array): number | undefined {
  if (isUtf8(bytes)) return undefined;
  for (let i = 0; i < bytes.length; ) {
    const lead = bytes[i]!;
    // The length the lead byte says its character has: a stray continuation byte, an
    // overlong form, a surrogate or a character cut short fails isUtf8 within it.
    const length = lead < 0x80 ? 1 : lead < 0xe0 ? 2 : lead < 0xf0 ? 3 : 4;
    if (!isUtf8(bytes.subarray(i, i + length))) return i;
    i += length;
  }
  return bytes.length;
}

/** What is wrong with `bytes` at `offset` (from firstNotUtf8Byte), for a refusal. */
export function notUtf8Description(bytes: Uint8Array, offset: number): string {
  return `the body is not valid UTF-8 (byte 0x${(bytes[offset] ?? 0).toString(16).padStart(2, "0")})`;
}
