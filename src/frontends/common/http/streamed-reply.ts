import { once } from "node:events";
import type { ServerResponse } from "node:http";
import { setTimeout as delay } from "node:timers/promises";
import type { FastifyReply } from "fastify";
import { asServerError, type ServerError } from "../../../core/errors.ts";
import type { StreamedInferResponse } from "../../../core/response-stream.ts";
import type { ResponseBudgets } from "../response-budget.ts";

// One HTTP answer carrying a request's responses as the model produces them (Server-Sent
// Events, SageMaker's JSON lines and response stream). The status goes out with the first
// response; each later one is written when it comes, in the route's framing, and a
// failure after the status can only be a frame of its own (a protocol may answer a
// failure before the first response so too, with the failure's status). Slow readers are
// waited for (the next frame is written once the socket drains, and the model's sending
// waits with it), for at most the idle time; a client that leaves, or takes nothing for
// that long, cancels the request, and the model is told.

export interface StreamedReplyOptions {
  /** The status line's headers (Content-Type among them); those hooks set on the reply go too. */
  readonly headers: Readonly<Record<string, string>>;
  /** The request's first response, already taken (undefined: it completed without one). */
  readonly first: StreamedInferResponse | undefined;
  /** Its later responses. */
  readonly rest: AsyncIterator<StreamedInferResponse>;
  /** A response's bytes on the wire. */
  readonly frame: (response: StreamedInferResponse) => string | Uint8Array;
  /** The frame that tells the client of a failure after the status went out. */
  readonly failure: (error: ServerError) => string | Uint8Array;
  /** Per-connection budgets of answers waiting for slow readers. */
  readonly budgets?: ResponseBudgets | undefined;
  /** A client that takes nothing for this long is let go; default: never. */
  readonly idleTimeoutMs?: number | undefined;
}

/** Whether `raw` drains before `ms` pass (false also when it closes first). */
async function drained(raw: ServerResponse, ms: number | undefined): Promise<boolean> {
  // Closed before this wait (a client that left while the frame was made): its "close" has
  // gone, and nothing drains; waiting would hold the request for the whole idle time.
  if (raw.destroyed) return false;
  const stop = new AbortController();
  const { signal } = stop;
  const waits: Promise<boolean>[] = [
    once(raw, "drain", { signal }).then(() => true),
    once(raw, "close", { signal }).then(() => false),
  ];
  if (ms !== undefined) waits.push(delay(ms, false, { signal, ref: false }));
  try {
    return await Promise.race(waits.map((wait) => wait.catch(() => false)));
  } finally {
    stop.abort();
  }
}

const byteLength = (frame: string | Uint8Array): number =>
  typeof frame === "string" ? Buffer.byteLength(frame) : frame.byteLength;

/** Takes `reply` over from Fastify and writes its status line. */
function takeOver(
  reply: FastifyReply,
  status: number,
  headers: Readonly<Record<string, string>>,
): ServerResponse {
  // The headers hooks set on the reply (CORS's among them) are only written by Fastify's
  // send: a hijacked reply writes them itself, or a browser page of an allowed origin
  // cannot read the stream.
  const hooked = reply.getHeaders();
  reply.hijack();
  const raw = reply.raw;
  for (const [name, value] of Object.entries(hooked)) {
    if (value !== undefined) raw.setHeader(name, value);
  }
  raw.writeHead(status, headers);
  return raw;
}

/**
 * Answers a request that failed before its first response, once its model had it (Triton's
 * generate_stream): the stream's status is the failure's, and it holds only `failure`,
 * the failure's frame.
 */
export function writeFailedStream(
  reply: FastifyReply,
  status: number,
  headers: Readonly<Record<string, string>>,
  failure: string | Uint8Array,
): void {
  takeOver(reply, status, headers).end(failure);
}

/** Writes the answer on `reply`, taken over from Fastify, and ends it. */
export async function writeStreamedReply(reply: FastifyReply, options: StreamedReplyOptions): Promise<void> {
  const { rest, frame, budgets, idleTimeoutMs } = options;
  const raw = takeOver(reply, 200, options.headers);
  // Frames count against the connection's budget until the socket has taken them.
  const budget = budgets?.acquire(raw.socket ?? raw);
  let next = options.first;
  try {
    while (next !== undefined) {
      const bytes = frame(next);
      const size = byteLength(bytes);
      if (budget !== undefined && !budget.take(size)) {
        await rest.return?.();
        raw.destroy();
        return;
      }
      if (!raw.write(bytes, () => budget?.give(size)) && !(await drained(raw, idleTimeoutMs))) {
        // It has taken nothing for the whole idle time: the request and its sequence end.
        raw.destroy();
      }
      if (raw.destroyed) {
        await rest.return?.();
        return;
      }
      const result = await rest.next();
      next = result.done === true ? undefined : result.value;
    }
  } catch (error) {
    raw.write(options.failure(asServerError(error)));
    // A response that could not be framed ends the request too: its model is told.
    await Promise.resolve(rest.return?.()).catch(() => {});
  } finally {
    budget?.release();
  }
  raw.end();
}
