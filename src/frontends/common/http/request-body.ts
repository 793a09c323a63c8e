import type { IncomingHttpHeaders } from "node:http";
import type { Readable } from "node:stream";
import { brotliDecompress, gunzip, inflate, inflateRaw, type ZlibOptions } from "node:zlib";
import { HttpError } from "./http-error.ts";

// Reads a request body into one Buffer that owns its memory (so tensors can be views over
// it, and may be handed to another thread), decompressing gzip / deflate / br bodies.
// The size limit applies to the bytes received and to the bytes they inflate to, so a
// small compressed body cannot expand without bound (a "zip bomb").

type Coding = "identity" | "gzip" | "deflate" | "br";
type Decompress = (
  buffer: Buffer,
  options: ZlibOptions,
  callback: (error: Error | null, result: Buffer) => void,
) => void;

const ACCEPTED = { "accept-encoding": "gzip, deflate, br" };

function codingOf(header: string | undefined): Coding {
  if (header === undefined) return "identity";
  const codings = header
    .split(",")
    .map((c) => c.trim().toLowerCase())
    .filter((c) => c !== "" && c !== "identity");
  if (codings.length === 0) return "identity";
  if (codings.length === 1) {
    const coding = codings[0];
    if (coding === "gzip" || coding === "x-gzip") return "gzip";
    if (coding === "deflate" || coding === "br") return coding;
  }
  throw new HttpError(
    415,
    `unsupported Content-Encoding '${header}': the server accepts gzip, deflate, br or identity`,
    ACCEPTED,
  );
}

/** A body whose bytes as sent are over the limit (not one that inflates past it). */
export class BodyTooLargeError extends HttpError {
  constructor(limit: number) {
    super(413, `request body is larger than the limit of ${limit} bytes`);
  }
}

const tooLarge = (limit: number): HttpError => new BodyTooLargeError(limit);

/**
 * How much of a body over the limit is read (and dropped) before its 413 is answered: a
 * client still sending when the answer closes the connection gets a reset (EPIPE) instead
 * of the answer. Past this much, the 413 goes out at once.
 */
const DISCARDED_MAX_BYTES = 32 * 1024 * 1024;

/** `buffer` itself when it owns its whole ArrayBuffer, else a copy that does. */
function owned(buffer: Buffer): Buffer {
  if (buffer.byteOffset === 0 && buffer.buffer.byteLength === buffer.byteLength) return buffer;
  const copy = Buffer.allocUnsafeSlow(buffer.byteLength);
  buffer.copy(copy);
  return copy;
}

/** Reads the bytes as sent, at most `limit` of them. */
function receive(stream: Readable, declared: number | undefined, limit: number): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const over = declared !== undefined && declared > limit;
    // With a Content-Length the body lands straight in its final buffer (node's parser
    // delivers exactly that many bytes); chunked bodies are gathered and joined once.
    const target = declared === undefined || over ? undefined : Buffer.allocUnsafeSlow(declared);
    const chunks: Buffer[] = [];
    let received = 0;
    /** Bytes dropped once the body went past the limit (undefined: it has not). */
    let discarded: number | undefined = over ? 0 : undefined;

    const finish = (error: Error | undefined): void => {
      stream.off("data", onData);
      stream.off("end", onEnd);
      stream.off("error", onError);
      stream.off("close", onClose);
      if (error !== undefined) {
        reject(error);
        return;
      }
      if (discarded !== undefined) {
        reject(tooLarge(limit));
        return;
      }
      if (target !== undefined) {
        resolve(received === target.byteLength ? target : target.subarray(0, received));
        return;
      }
      const body = Buffer.allocUnsafeSlow(received);
      let offset = 0;
      for (const chunk of chunks) {
        chunk.copy(body, offset);
        offset += chunk.byteLength;
      }
      resolve(body);
    };
    const onData = (chunk: Buffer): void => {
      if (discarded === undefined && received + chunk.byteLength > limit) {
        discarded = 0;
        chunks.length = 0;
      }
      if (discarded !== undefined) {
        // Read to its end and dropped, so that the client gets to read the answer; past
        // DISCARDED_MAX_BYTES, answered at once (the stream keeps flowing with no listener).
        discarded += chunk.byteLength;
        if (discarded > DISCARDED_MAX_BYTES) finish(tooLarge(limit));
        return;
      }
      if (target !== undefined) chunk.copy(target, received);
      else chunks.push(chunk);
      received += chunk.byteLength;
    };
    const onEnd = (): void => finish(undefined);
    const onError = (error: Error): void =>
      finish(new HttpError(400, `request body ended before it was complete: ${error.message}`));
    const onClose = (): void => finish(new HttpError(400, "request body ended before it was complete"));

    stream.on("data", onData);
    stream.on("end", onEnd);
    stream.on("error", onError);
    stream.on("close", onClose);
    stream.resume();
  });
}

/** zlib-wrapped (RFC 1950) or raw (RFC 1951) deflate: clients send both as "deflate". */
function hasZlibHeader(body: Buffer): boolean {
  const cmf = body[0];
  const flg = body[1];
  return cmf !== undefined && flg !== undefined && (cmf & 0x0f) === 8 && ((cmf << 8) | flg) % 31 === 0;
}

function decompress(coding: Exclude<Coding, "identity">, body: Buffer, limit: number): Promise<Buffer> {
  let run: Decompress;
  if (coding === "gzip") run = gunzip;
  else if (coding === "br") run = brotliDecompress;
  else run = hasZlibHeader(body) ? inflate : inflateRaw;
  return new Promise((resolve, reject) => {
    // maxOutputLength makes zlib stop as soon as the output passes the limit.
    run(body, { maxOutputLength: limit }, (error, result) => {
      if (error === null) {
        resolve(owned(result));
        return;
      }
      if ((error as NodeJS.ErrnoException).code === "ERR_BUFFER_TOO_LARGE") {
        reject(new HttpError(413, `request body inflates to more than the limit of ${limit} bytes`));
        return;
      }
      reject(new HttpError(400, `unable to decompress the ${coding} request body: ${error.message}`));
    });
  });
}

/** The whole request body, decompressed, in a Buffer of its own. */
export async function readRequestBody(
  stream: Readable,
  headers: IncomingHttpHeaders,
  limit: number,
): Promise<Buffer> {
  const coding = codingOf(headers["content-encoding"]);
  const length = headers["content-length"];
  const declared = length === undefined ? undefined : Number(length);
  const body = await receive(stream, Number.isSafeInteger(declared) ? declared : undefined, limit);
  if (coding === "identity" || body.byteLength === 0) return body;
  return decompress(coding, body, limit);
}
