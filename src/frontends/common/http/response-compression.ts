import { promisify } from "node:util";
import { constants, deflate, gzip, type ZlibOptions } from "node:zlib";
import type { FastifyReply, FastifyRequest } from "fastify";

// Compressed responses for clients that ask with Accept-Encoding, as Triton does: the
// coding with the highest q-value among gzip, deflate and identity wins. Small bodies are
// sent as they are: compressing them costs more than it saves. The fastest level is used,
// since inference answers are hot and most of the gain comes from the first pass.

export type ResponseCoding = "gzip" | "deflate" | "identity";

const compressors = {
  gzip: promisify<Buffer, ZlibOptions, Buffer>(gzip),
  deflate: promisify<Buffer, ZlibOptions, Buffer>(deflate),
};
const FAST: ZlibOptions = { level: constants.Z_BEST_SPEED };

/** The coding to answer with, given the request's Accept-Encoding. */
export function negotiateCoding(header: string | undefined): ResponseCoding {
  if (header === undefined) return "identity";
  let best: ResponseCoding = "identity";
  let bestWeight = 0;
  for (const entry of header.split(",")) {
    const [name = "", ...params] = entry.split(";").map((part) => part.trim());
    const coding = name.toLowerCase();
    if (coding !== "gzip" && coding !== "deflate" && coding !== "identity") continue;
    const q = params.find((p) => p.startsWith("q="));
    const weight = q === undefined ? 1 : Number(q.slice(2));
    if (Number.isFinite(weight) && weight > bestWeight) {
      best = coding;
      bestWeight = weight;
    }
  }
  return best;
}

type OnSend = (
  request: FastifyRequest,
  reply: FastifyReply,
  payload: unknown,
  done: (error: Error | null, payload?: unknown) => void,
) => void;

/** An onSend hook compressing responses of at least `minBytes` for clients that accept it. */
export function compressResponses(minBytes: number): OnSend {
  // Callback style: the common answer (nothing to do) costs no promise.
  return (request, reply, payload, done) => {
    const accepted = request.headers["accept-encoding"];
    if (accepted === undefined || (typeof payload !== "string" && !Buffer.isBuffer(payload))) {
      done(null, payload);
      return;
    }
    // A string's length is close enough to its byte size for a threshold.
    const size = typeof payload === "string" ? payload.length : payload.byteLength;
    const coding = negotiateCoding(accepted);
    if (coding === "identity" || size < minBytes || reply.hasHeader("content-encoding")) {
      done(null, payload);
      return;
    }
    const body = typeof payload === "string" ? Buffer.from(payload) : payload;
    compressors[coding](body, FAST).then((compressed) => {
      reply.header("content-encoding", coding).header("vary", "accept-encoding");
      reply.removeHeader("content-length");
      done(null, compressed);
    }, done);
  };
}
