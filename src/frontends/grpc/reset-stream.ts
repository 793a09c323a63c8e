import { constants, type Http2Stream } from "node:http2";
import type { ServerDuplexStream } from "@grpc/grpc-js";

// Ending a ModelStreamInfer call whose client has stopped reading. A status (what
// `call.emit("error", …)` sends) goes out after the answers already handed to HTTP/2, so a
// client that reads nothing never gets it, and the server keeps those answers, and the
// call, for as long as the client keeps its connection. Only a reset (RST_STREAM CANCEL)
// frees them at once. grpc-js has no public way to reset a server call: its call object
// holds the HTTP/2 stream (`call.call.nextCall….stream` in the pinned 1.14, one
// `nextCall` per interceptor, or `call.call.stream` without interceptors), so it is looked
// for there, and recognised by what it is; test/security/response-budget.test.ts fails if a grpc-js update moves it.

/** The call's HTTP/2 stream, where grpc-js keeps it; undefined when it is not found. */
function http2StreamOf(call: ServerDuplexStream<unknown, unknown>): Http2Stream | undefined {
  type Layer = { nextCall?: Layer; stream?: unknown };
  // One layer per interceptor of the server, then grpc-js's own call.
  let layer = (call as unknown as { call?: Layer }).call;
  for (let depth = 0; layer !== undefined && depth < 16; depth++, layer = layer.nextCall) {
    const stream = layer.stream as Partial<Http2Stream> | undefined;
    if (typeof stream?.close === "function" && typeof stream.session === "object")
      return stream as Http2Stream;
  }
  return undefined;
}

/**
 * Resets the call's HTTP/2 stream (CANCEL): the answers waiting in HTTP/2 are dropped and
 * the call ends (its `cancelled` event). False when the stream cannot be reached.
 */
export function resetCall(call: ServerDuplexStream<unknown, unknown>): boolean {
  const stream = http2StreamOf(call);
  if (stream === undefined) return false;
  if (!stream.closed) stream.close(constants.NGHTTP2_CANCEL);
  return true;
}
