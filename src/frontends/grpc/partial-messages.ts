import { constants, type IncomingHttpHeaders, type ServerHttp2Stream } from "node:http2";
import { ServerError } from "../../core/errors.ts";
import type { Refusals } from "../../core/refusals.ts";
import { statusOf } from "./error-status.ts";
import type { Http2ServerOf } from "./http2-servers.ts";
import { statusTableOf } from "./service-status-table.ts";

// What gRPC messages not yet received in full hold, server-wide
// (--grpc-max-partial-message-bytes-total). grpc-js reads every DATA frame as it comes,
// which opens the HTTP/2 window again, and keeps a message's bytes until the message is
// whole: a client declaring a 2 GiB message (up to --grpc-max-message-bytes) and never
// finishing it made the server hold all it sent, on each of its streams and connections.
//
// Each stream's DATA is followed here beside grpc-js's own reading, without copying it:
// the gRPC framing (1 flag byte, 4 length bytes, the message) tells how much of the
// current message has come. Bytes are counted once a chunk leaves its message unfinished
// (a message that comes whole in one chunk costs nothing), and given back when the
// message is whole (grpc-js hands it on; what it becomes is bounded by the other limits)
// or its stream closes, resets, or loses its connection. A call grpc-js has ended while
// its client still sends (a message past --grpc-max-message-bytes) counts what comes until
// its stream closes, though grpc-js no longer keeps it: the bound errs on the safe side.
//
// When a chunk would take the total past the bound, the connection holding the most
// gives way, a stream at a time: a client sending messages it never finishes is refused
// before a client whose message is smaller, and a message up to the bound is taken on a
// server otherwise idle. A refused stream gets RESOURCE_EXHAUSTED naming the flag (a
// trailers-only answer, then RST_STREAM NO_ERROR so its client stops sending), or, once
// its answers have begun, RST_STREAM ENHANCE_YOUR_CALM (which gRPC clients report as
// RESOURCE_EXHAUSTED): a status would wait behind answers its client may not read.
// grpc-js's listener runs before this one, so the chunk that passes the bound is held
// until the reset frees the stream.

/** The gRPC message prefix: a flag byte, then the message's length in 4 bytes. */
const PREFIX_BYTES = 5;

/** The partial messages of one connection's streams (present while it holds any). */
class ConnectionHold {
  bytes = 0;
  readonly streams = new Set<StreamFollower>();
}

export class PartialMessageBytes {
  readonly limitBytes: number;
  readonly refusals: Refusals | undefined;
  /** By HTTP/2 session: only connections holding bytes, so the search for the largest is short. */
  readonly #holds = new Map<object, ConnectionHold>();
  #total = 0;

  constructor(limitBytes: number, refusals?: Refusals) {
    this.limitBytes = limitBytes;
    this.refusals = refusals;
  }

  /** Bytes of gRPC messages received in part, over every connection. */
  get totalBytes(): number {
    return this.#total;
  }

  /** The words a refused call is answered with. */
  get refusal(): string {
    return `gRPC messages received in part would hold more than ${this.limitBytes} bytes, this call's connection the most of them (--grpc-max-partial-message-bytes-total)`;
  }

  /**
   * Counts `bytes` more of `stream`'s unfinished message. When the total would pass the
   * bound, the other connection holding the most loses streams while it holds more than
   * this one would; false (nothing counted) when this one would hold the most.
   */
  take(stream: StreamFollower, bytes: number): boolean {
    let hold = stream.hold;
    while (this.#total + bytes > this.limitBytes) {
      const largest = this.#largestOther(stream.session);
      // What this stream's connection holds: its other streams' too, if this one holds nothing yet.
      const own = (hold ?? this.#holds.get(stream.session))?.bytes ?? 0;
      if (largest === undefined || largest.bytes <= own + bytes) return false;
      for (const victim of largest.streams) {
        victim.refuse();
        break;
      }
    }
    if (hold === undefined) {
      hold = this.#holds.get(stream.session);
      if (hold === undefined) {
        hold = new ConnectionHold();
        this.#holds.set(stream.session, hold);
      }
      hold.streams.add(stream);
      stream.hold = hold;
    }
    stream.heldBytes += bytes;
    hold.bytes += bytes;
    this.#total += bytes;
    return true;
  }

  /** Gives back all `stream` holds: its message is whole, or the stream is gone. */
  give(stream: StreamFollower): void {
    const hold = stream.hold;
    if (hold === undefined) return;
    hold.bytes -= stream.heldBytes;
    this.#total -= stream.heldBytes;
    stream.heldBytes = 0;
    stream.hold = undefined;
    hold.streams.delete(stream);
    if (hold.streams.size === 0) this.#holds.delete(stream.session);
  }

  #largestOther(session: object): ConnectionHold | undefined {
    let largest: ConnectionHold | undefined;
    for (const [key, hold] of this.#holds) {
      if (key !== session && (largest === undefined || hold.bytes > largest.bytes)) largest = hold;
    }
    return largest;
  }
}

/** One stream's progress through its messages, and what its current one holds. */
export class StreamFollower {
  readonly session: object;
  heldBytes = 0;
  /** Its connection's hold, while it holds bytes. */
  hold: ConnectionHold | undefined;
  readonly #stream: ServerHttp2Stream;
  /** The called method (`/<package>.<Service>/<Method>`), whose family's table gives the refusal's code. */
  readonly #method: string;
  readonly #budget: PartialMessageBytes;
  /** Bytes of the current prefix read (0 = the next byte begins a message). */
  #prefixRead = 0;
  #length = 0;
  /** Bytes of the current message still to come. */
  #remaining = 0;
  #refused = false;

  constructor(stream: ServerHttp2Stream, method: string, session: object, budget: PartialMessageBytes) {
    this.#stream = stream;
    this.#method = method;
    this.session = session;
    this.#budget = budget;
  }

  /** A DATA chunk of the stream, as grpc-js has just read it. */
  received(chunk: Buffer): void {
    if (this.#refused) return;
    const end = chunk.length;
    let at = 0;
    while (at < end) {
      if (this.#remaining > 0) {
        const left = end - at;
        if (left < this.#remaining) {
          // The message goes on past this chunk.
          this.#remaining -= left;
          if (!this.#budget.take(this, left)) this.refuse();
          return;
        }
        at += this.#remaining;
        this.#remaining = 0;
        this.#budget.give(this);
        continue;
      }
      const byte = chunk[at++]!;
      // The flag byte (read 0) says nothing of the length.
      if (this.#prefixRead > 0) this.#length = this.#length * 256 + byte;
      if (++this.#prefixRead === PREFIX_BYTES) {
        this.#remaining = this.#length;
        this.#prefixRead = 0;
        this.#length = 0;
      }
    }
  }

  /** The stream is gone (closed, reset, its connection lost). */
  closed(): void {
    this.#refused = true;
    this.#budget.give(this);
  }

  /** Ends the call: RESOURCE_EXHAUSTED if nothing has been answered yet, else a reset. */
  refuse(): void {
    this.#refused = true;
    this.#budget.give(this);
    this.#budget.refusals?.refused("grpc_partial_message_bytes");
    const stream = this.#stream;
    if (stream.closed || stream.destroyed) return;
    if (!stream.headersSent) {
      const refusal = statusOf(
        new ServerError("RESOURCE_EXHAUSTED", this.#budget.refusal),
        statusTableOf(this.#method),
      );
      try {
        stream.respond(
          {
            ":status": 200,
            "content-type": "application/grpc+proto",
            "grpc-status": String(refusal.code),
            "grpc-message": encodeURI(refusal.details),
          },
          { endStream: true },
        );
        // After the status: the client is to send no more of its message.
        stream.close(constants.NGHTTP2_NO_ERROR);
        return;
      } catch {
        // The stream could not take an answer: reset it.
      }
    }
    stream.close(constants.NGHTTP2_ENHANCE_YOUR_CALM);
  }
}

/** Follows the partial messages of every gRPC call `http2Server` receives. */
export function followPartialMessages(http2Server: Http2ServerOf, budget: PartialMessageBytes): void {
  http2Server.on("stream", (stream: ServerHttp2Stream, headers: IncomingHttpHeaders) => {
    // grpc-js's listener has run: a call it answered at once (an unknown method, a wrong
    // content type) is read by no one, and following it would set its data flowing.
    if (stream.headersSent || stream.closed || stream.destroyed) return;
    const session = stream.session;
    if (session === undefined) return;
    const follower = new StreamFollower(stream, headers[":path"] ?? "", session, budget);
    stream.on("data", (chunk: Buffer) => follower.received(chunk));
    stream.once("close", () => follower.closed());
  });
}
