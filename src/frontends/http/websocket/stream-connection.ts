import { setMaxListeners } from "node:events";
import type { FastifyBaseLogger } from "fastify";
import type { RawData, WebSocket } from "ws";
import { asServerError, cancelled, invalidArg, type ServerError } from "../../../core/errors.ts";
import type { InferRequest, InferResponse, SequenceControl, SequenceId } from "../../../core/infer.ts";
import type { SequenceAdmin, SequenceEndReason, ServedModel } from "../../../core/model.ts";
import { inferStream } from "../../../core/response-stream.ts";
import { Deque } from "../../../core/scheduler/request-queue.ts";
import { formatSequenceId } from "../../../core/sequence/sequence-parameters.ts";
import { timerDelay } from "../../../core/timer-delay.ts";
import { relayResponses, type WaitingResponses } from "../../common/kserve/decoupled-responses.ts";
import {
  type DecodedInferRequest,
  type DecodeOptions,
  decodeInferJson,
  decodeInferRequest,
  type InferJson,
  type OutputEncoding,
  parseInferJson,
  parseInferJsonOffThread,
} from "../../common/kserve/infer-request-decoder.ts";
import {
  type EncodedInferResponse,
  encodeInferResponse,
  encodeInferResponseOffThread,
} from "../../common/kserve/infer-response-encoder.ts";
import { STREAM_RESERVED_PARAMETERS } from "../../common/kserve/reserved-parameters.ts";
import type { ConnectionBudget } from "../../common/response-budget.ts";
import { OFF_THREAD_JSON_BYTES } from "../../json-thread/json-thread.ts";
import { CLOSE_CODES, isDeliberateClose } from "./close-codes.ts";
import { type SequenceHolder, SequenceOwners } from "./sequence-owners.ts";
import {
  closeReason,
  endText,
  errorText,
  FRAME_PREFIX_BYTES,
  isEndMessage,
  readFrame,
  writeFramePrefix,
} from "./stream-framing.ts";
import type { StreamOptions } from "./stream-options.ts";

// One WebSocket stream: one sequence of a model served with sequence batching (for a
// stateless model, a pipe of independent requests).
//
// The connection owns the sequence fields. Its first request carries START (with the
// client's id, or none: the server assigns one and the first answer names it); until a
// start has succeeded, later messages wait, since they can only continue a sequence that
// exists. After that, requests start as they arrive, up to `maxInFlight`; the core runs a
// sequence's requests in arrival order, and answers leave in arrival order whatever order
// they complete in. A failed request is answered in-band and the stream goes on, unless
// the failure shows that the sequence is gone: then the stream closes (4410).
//
// Back-pressure: reading stops while `maxInFlight` messages are unanswered or while more
// than `writeHighWaterBytes` wait to be sent, and resumes when both clear. Messages that
// `ws` had already read when reading stopped wait without starting.
//
// A client that leaves before ending its sequence ends it: reason "end" for a deliberate
// close, "cancelled" for anything else. If another stream has started the same id since
// (a client reconnecting before its old connection was seen to drop), the old stream
// neither continues nor ends the new sequence. A stream continuing a sequence begun
// elsewhere (`sequence_start=false`) ends it on leaving only once it has driven it: one of
// its steps has run, or is in flight. Until then the sequence is still its other client's,
// which may be stepping it over HTTP or gRPC: a socket opened and dropped ends nothing.
// A stream of the same id it took the sequence from goes on stepping it until then, and
// gets it back if it leaves without driving it (sequence-owners.ts); if that stream leaves
// first, its close ends the sequence once the taker leaves without driving it.
// Requests not yet run are aborted through one signal shared by the whole connection (one
// AbortController per message would be a measurable part of its cost; a request no longer
// listens once it is answered).

export interface StreamLimits {
  /** Messages received and not yet answered beyond which reading stops. */
  readonly maxInFlight: number;
  /** Bytes of messages received and not yet answered beyond which reading stops (--max-held-request-bytes). */
  readonly maxHeldRequestBytes: number;
  /** Bytes waiting to be sent beyond which reading stops until the client catches up. */
  readonly writeHighWaterBytes: number;
  /** A stream with no message and nothing in flight this long is closed (1001); undefined = never. */
  readonly idleTimeoutMs?: number | undefined;
  /** Told when a stream is closed for idling. */
  readonly onIdleClose?: (() => void) | undefined;
}

/** A large message's JSON, parsed on the JSON thread, and the message's memory given back. */
interface ParsedMessage {
  readonly json: InferJson;
  /** The message (a binary message: after its prefix), in place of `data`, which is emptied. */
  readonly body: Buffer;
  /** A binary message's JSON header length; undefined for a text message. */
  readonly headerLength: number | undefined;
}

/** One message, from arrival to answer. */
class StreamEntry {
  readonly data: Buffer;
  readonly binary: boolean;
  /** Its size as received, held against --max-held-request-bytes until it is answered. */
  readonly bytes: number;
  /** A large message, once parsed on the JSON thread (or why that failed). */
  parsed: ParsedMessage | { readonly failure: unknown } | undefined;
  requestId = "";
  encoding: OutputEncoding | undefined;
  /** Its request starts the sequence: its answer brings the id. */
  starts = false;
  /** The sequence ends with it: its request sets sequence_end, or it is the end message. */
  ends = false;
  /** The end message, carried out when its turn to be answered comes. */
  endMessage = false;
  /** What to send, in order: one answer, or a decoupled model's responses as they come. */
  readonly answers: HeldAnswer[] = [];
  /** Every answer is known: once sent, the entry is done. */
  complete = false;
  /** A decoupled request's relay waits here while its responses wait to be sent. */
  sent: (() => void) | undefined;
  /** Set when the connection closes after sending the answer. */
  closeCode: number | undefined;
  closeText = "";

  constructor(data: Buffer, binary: boolean) {
    this.data = data;
    this.binary = binary;
    this.bytes = data.byteLength;
  }
}

/** What an answer occupies on the socket (a text frame is UTF-8). */
const sizeOf = (data: string | Buffer): number =>
  typeof data === "string" ? Buffer.byteLength(data) : data.byteLength;

/** An answer waiting for its turn, with its size, counted once for the budget and the socket. */
interface HeldAnswer {
  readonly data: string | Buffer;
  readonly size: number;
  /** A binary frame; otherwise text (a string, or JSON written as UTF-8 bytes on the JSON thread). */
  readonly binary: boolean;
}

/** An encoded answer as a message: JSON text, or a binary frame with its header length first. */
function framed(encoded: EncodedInferResponse): string | Buffer {
  if (encoded.headerLength === undefined) return encoded.body;
  return writeFramePrefix(encoded.body as Buffer, encoded.headerLength);
}

/** Whether `buffer` is the whole of its memory, which can then move to another thread. */
const ownsMemory = (buffer: Buffer): boolean =>
  buffer.byteOffset === 0 && buffer.byteLength === buffer.buffer.byteLength;

function asBuffer(data: RawData): Buffer {
  if (Buffer.isBuffer(data)) return data;
  return Array.isArray(data) ? Buffer.concat(data) : Buffer.from(data);
}

/** The id a start's answer names (the core returns a server-assigned id there). */
function answeredId(response: InferResponse): SequenceId | undefined {
  const id = response.parameters.sequence_id;
  if (typeof id === "bigint" || (typeof id === "string" && id !== "")) return id;
  if (typeof id === "number" && Number.isSafeInteger(id) && id > 0) return BigInt(id);
  return undefined;
}

/**
 * Whether a failure of an established sequence's request means the sequence is gone:
 * its queued requests fail CANCELLED when it is ended or cancelled, UNAVAILABLE at
 * shutdown, and once its id is forgotten (idle timeout, forced end) the core answers with
 * Triton's wording for a continuation without START.
 */
/** The core's refusal of a step for a sequence it does not know (ended, or never started). */
function isStartMissing(error: ServerError): boolean {
  return error.code === "INVALID_ARG" && error.message.includes("must specify the START flag");
}

function isSequenceGone(error: ServerError): boolean {
  return error.code === "CANCELLED" || error.code === "UNAVAILABLE" || isStartMissing(error);
}

export class StreamConnection implements SequenceHolder {
  readonly #socket: WebSocket;
  /** The model the stream opened on, used once it is no longer served (unloaded). */
  readonly #opened: ServedModel;
  readonly #current: () => ServedModel;
  readonly #raw: boolean;
  readonly #limits: StreamLimits;
  readonly #logger: FastifyBaseLogger;
  readonly #owners: SequenceOwners;
  /** The key this stream claimed its id under, once the id is known. */
  #ownerKey: string | undefined;
  readonly #controller = new AbortController();
  readonly #binaryOptions: DecodeOptions;
  readonly #textOptions: DecodeOptions;
  /** Received, not started: the start is running, or `maxInFlight` requests are. */
  readonly #waiting = new Deque<StreamEntry>();
  /** Started, in arrival order; answered from the front. */
  readonly #answering = new Deque<StreamEntry>();
  #running = 0;
  #id: SequenceId | undefined;
  /** A start has succeeded (always true for a stateless model: nothing to start). */
  #established: boolean;
  /** The stream continues a sequence begun elsewhere (`sequence_start=false`). */
  #continues = false;
  /** One of the stream's steps (not a start) has been answered: it has run in the sequence. */
  #stepped = false;
  #startRunning = false;
  /** A large message is being parsed on the JSON thread: what follows it waits. */
  #parsing = false;
  /** Nothing more starts: the sequence is ending or gone, or the connection is closing. */
  #stopped = false;
  /**
   * Nothing is left to end on close: the client's end went through, or the sequence is
   * gone (ending its id again could end a new sequence that has taken it since).
   */
  #over = false;
  #closing = false;
  #closed = false;
  /** For a start still running at close: how to end the sequence its answer names. */
  #lateEnd: SequenceEndReason | undefined;
  #paused = false;
  #writeBlocked = false;
  /** Bytes of the messages received and not yet answered: a count alone bounds nothing. */
  #heldRequestBytes = 0;
  /** The connection's budget of answers waiting to be sent (response-budget.ts). */
  readonly #budget: ConnectionBudget;
  /** A decoupled request's responses not yet taken count in the budget too. */
  readonly #waitingResponses: WaitingResponses;
  readonly #stopWatchingBudget: () => void;
  /** Sizes of the answers handed to the socket, in order, given back as each is sent. */
  readonly #sentSizes = new Deque<number>();
  #idleTimer: NodeJS.Timeout | undefined;

  /**
   * The model as it is served now. A reload of the model swaps a new version in, and the
   * stream's sequence moves there with its state: each message goes to where it is.
   */
  get #model(): ServedModel {
    try {
      return this.#current();
    } catch {
      return this.#opened;
    }
  }

  /** Why the stream's model is not served now (unloaded); undefined while it is. */
  #unserved(): ServerError | undefined {
    try {
      this.#current();
      return undefined;
    } catch (error) {
      return asServerError(error);
    }
  }

  get #sequences(): SequenceAdmin | undefined {
    return this.#model.sequences;
  }

  /**
   * Whether the stream's sequence is the stream's to end when its client leaves: it
   * started it, or, continuing one begun elsewhere, one of its steps has run or is in
   * flight (a client that leaves mid-step leaves the sequence half driven). A continuing
   * stream that has run nothing leaves the sequence to whoever was driving it (an HTTP or
   * gRPC client, another stream): opening a socket and dropping it ends nothing.
   */
  get #drives(): boolean {
    return this.#established && (!this.#continues || this.#stepped || this.#running > 0);
  }

  /** The client has not left: a sequence another stream took and did not drive comes back to it. */
  get open(): boolean {
    return !this.#closed;
  }

  constructor(
    socket: WebSocket,
    model: ServedModel,
    current: () => ServedModel,
    options: StreamOptions,
    limits: StreamLimits,
    owners: SequenceOwners,
    logger: FastifyBaseLogger,
    budget: ConnectionBudget,
    principal?: string,
  ) {
    this.#socket = socket;
    this.#budget = budget;
    this.#waitingResponses = {
      budget,
      overflow: () => {
        if (!this.#closing) this.#overflow();
      },
    };
    this.#stopWatchingBudget = budget.onRoom(() => {
      if (!this.#closing) this.#advance();
    });
    this.#opened = model;
    this.#current = current;
    this.#raw = options.format === "raw";
    this.#limits = limits;
    this.#logger = logger;
    this.#owners = owners;
    this.#id = options.sequenceId;
    this.#established = model.sequences === undefined;
    // Continuing a sequence begun elsewhere: its messages are steps, not a START, and the
    // stream holds the sequence from the start (a stream of the same id still open here,
    // cut, no longer ends it). Its own close ends the sequence only once it has driven it
    // (#drives); until then that other stream goes on stepping it, and gets it back if this
    // one leaves. Another key's stream of a sequence live here was refused before the
    // upgrade (streamTarget).
    if (options.continues && model.sequences !== undefined && this.#id !== undefined) {
      this.#established = true;
      this.#continues = true;
      this.#claim(this.#id, "continue");
    }
    const signal = this.#controller.signal;
    // One listener per request in flight, so up to maxInFlight: not a leak.
    setMaxListeners(0, signal);
    const reservedParameters = STREAM_RESERVED_PARAMETERS;
    this.#binaryOptions = {
      signal,
      binaryOutputByDefault: options.binaryOutput ?? true,
      principal,
      reservedParameters,
    };
    this.#textOptions = {
      signal,
      binaryOutputByDefault: options.binaryOutput ?? false,
      principal,
      reservedParameters,
    };
    if (limits.idleTimeoutMs !== undefined) {
      this.#idleTimer = setTimeout(this.#onIdle, timerDelay(limits.idleTimeoutMs));
      this.#idleTimer.unref();
    }
    socket.binaryType = "nodebuffer";
    socket.on("message", (data: RawData, isBinary: boolean) => this.#receive(data, isBinary));
    socket.on("close", (code: number) => this.#onClose(code));
  }

  #receive(data: RawData, isBinary: boolean): void {
    this.#idleTimer?.refresh();
    // After the end, or once closing, messages are not answered.
    if (this.#stopped) return;
    const entry = new StreamEntry(asBuffer(data), isBinary);
    this.#heldRequestBytes += entry.bytes;
    this.#waiting.push(entry);
    this.#advance();
  }

  #advance(): void {
    this.#pump();
    this.#flush();
    this.#updateFlow();
  }

  #pump(): void {
    // A connection whose answers wait for its client starts nothing more until they drain.
    while (!this.#stopped && this.#running < this.#limits.maxInFlight && !this.#budget.saturated) {
      // The start runs alone: whether later messages can continue a sequence depends on it.
      // A message being parsed holds back those after it: they start in the stream's order.
      if (this.#startRunning || this.#parsing) return;
      const entry = this.#waiting.shift();
      if (entry === undefined) return;
      this.#answering.push(entry);
      this.#start(entry);
    }
  }

  #start(entry: StreamEntry): void {
    if (entry.parsed === undefined && this.#parseOffThread(entry)) return;
    let request: InferRequest;
    try {
      const decoded = this.#decode(entry);
      if (decoded === undefined) {
        entry.endMessage = true;
        entry.ends = true;
        this.#stopped = true;
        return;
      }
      entry.encoding = decoded.encoding;
      request = this.#sequenced(entry, decoded.request);
    } catch (error) {
      // A message that cannot be decoded is answered and skipped; it starts nothing.
      this.#answer(entry, errorText(asServerError(error).message, entry.requestId));
      return;
    }
    if (entry.starts) {
      this.#startRunning = true;
    } else if (this.#ownerKey !== undefined) {
      // Another stream started the id again, or took it to continue it and drove it.
      if (!this.#owners.steers(this.#ownerKey, this)) {
        this.#takenOver(entry);
        return;
      }
      this.#owners.drove(this);
    }
    if (entry.ends) this.#stopped = true;
    this.#running++;
    if (this.#model.decoupled === true) {
      this.#relay(entry, request);
      return;
    }
    let pending: Promise<InferResponse>;
    try {
      pending = this.#model.infer(request);
    } catch (error) {
      pending = Promise.reject(error);
    }
    pending.then(
      (response) => this.#answered(entry, response),
      (error: unknown) => this.#failed(entry, error),
    );
  }

  /**
   * A message whose JSON is OFF_THREAD_JSON_BYTES or more is parsed on the JSON thread
   * before it starts (true then), so the event loop goes on serving other streams.
   */
  #parseOffThread(entry: StreamEntry): boolean {
    // A raw stream's binary messages are an input's bytes; its text messages are JSON.
    if (this.#raw && entry.binary) return false;
    const data = entry.data;
    let jsonLength = data.byteLength;
    if (entry.binary) {
      // A frame readFrame refuses, or the raw input, is decoded in place.
      if (data.byteLength < FRAME_PREFIX_BYTES) return false;
      jsonLength = data.readUInt32LE(0);
      if (jsonLength === 0 || jsonLength > data.byteLength - FRAME_PREFIX_BYTES) return false;
    }
    if (jsonLength < OFF_THREAD_JSON_BYTES) return false;
    // The message's memory moves there and back: a view of memory shared with others is
    // copied first.
    let own = data;
    if (!ownsMemory(data)) {
      own = Buffer.allocUnsafeSlow(data.byteLength);
      data.copy(own);
    }
    const headerLength = entry.binary ? jsonLength : undefined;
    this.#parsing = true;
    parseInferJsonOffThread(entry.binary ? own.subarray(FRAME_PREFIX_BYTES) : own, jsonLength)
      .then(
        (json) => {
          entry.parsed = { json, body: json.body, headerLength };
        },
        (failure: unknown) => {
          entry.parsed = { failure };
        },
      )
      .then(() => {
        this.#parsing = false;
        if (this.#closing) return;
        this.#start(entry);
        this.#advance();
      });
    return true;
  }

  /** The message's request; undefined for the end message. */
  #decode(entry: StreamEntry): DecodedInferRequest | undefined {
    const parsed = entry.parsed;
    if (parsed !== undefined) {
      if ("failure" in parsed) throw parsed.failure;
      const options = entry.binary ? this.#binaryOptions : this.#textOptions;
      return this.#decodeJson(entry, parsed.body, parsed.headerLength, options, parsed.json);
    }
    const data = entry.data;
    if (!entry.binary) return this.#decodeJson(entry, data, undefined, this.#textOptions);
    if (this.#raw) return decodeInferRequest(data, 0, this.#model, this.#binaryOptions);
    const { headerLength, body } = readFrame(data);
    // A zero header length means the raw bytes of the only input, as over HTTP.
    if (headerLength === 0) return decodeInferRequest(body, 0, this.#model, this.#binaryOptions);
    return this.#decodeJson(entry, body, headerLength, this.#binaryOptions);
  }

  #decodeJson(
    entry: StreamEntry,
    body: Buffer,
    headerLength: number | undefined,
    options: DecodeOptions,
    parsed: InferJson = parseInferJson(body, headerLength ?? body.byteLength),
  ): DecodedInferRequest | undefined {
    const id = parsed.object.id;
    if (typeof id === "string") entry.requestId = id;
    if (isEndMessage(parsed.object)) return undefined;
    return decodeInferJson(parsed, body, headerLength, this.#model, options);
  }

  /** The request with the connection's sequence fields. */
  #sequenced(entry: StreamEntry, request: InferRequest): InferRequest {
    const { parameters } = request;
    if (parameters.sequence_id !== undefined || parameters.sequence_start !== undefined) {
      throw invalidArg(
        "a stream's messages may not set 'sequence_id' or 'sequence_start': the connection owns its sequence (choose the id with the URL's 'sequence_id' query parameter)",
      );
    }
    entry.ends = request.sequence?.end ?? false;
    if (this.#sequences === undefined) {
      return request.sequence === undefined ? request : { ...request, sequence: undefined };
    }
    entry.starts = !this.#established;
    const sequence: SequenceControl = {
      id: this.#id,
      start: entry.starts,
      end: entry.ends,
      timeoutUs: request.sequence?.timeoutUs,
      // A stream never continues a sequence whose start failed: it starts again. The core
      // ends such a sequence itself when it assigned the id.
      ...(entry.starts && this.#id !== undefined
        ? { onStarted: this.#startTaken, endIfStartFails: true }
        : {}),
    };
    // Everything else (the caller, its trace context) goes with the request as it came.
    return { ...request, parameters, sequence };
  }

  /**
   * A decoupled model's request: its responses are sent as they come, in order, and the
   * next waits until they have reached the socket, so a client that reads slowly slows
   * the model down rather than filling this server's memory. A start that sends nothing
   * is answered with an empty response naming the sequence.
   */
  #relay(entry: StreamEntry, request: InferRequest): void {
    const stream = inferStream(this.#model, request);
    let responses = 0;
    const send = (response: InferResponse): Promise<void> | undefined => {
      // Closing: nothing more is sent, so the model is stopped rather than left to run on
      // with every response dropped.
      if (this.#closing) {
        stream.cancel();
        return undefined;
      }
      const named = responses++ === 0 && entry.starts ? this.#named(response) : response;
      this.#push(entry, named);
      this.#advance();
      return entry.answers.length > 0 || this.#writeBlocked
        ? new Promise<void>((resolve) => {
            entry.sent = resolve;
          })
        : undefined;
    };
    relayResponses(this.#model, stream, request, send, this.#waitingResponses).then(
      () => {
        if (responses === 0 && entry.starts && !this.#closed) {
          send({
            modelName: this.#model.name,
            modelVersion: this.#model.version,
            id: request.id,
            parameters: stream.parameters,
            outputs: [],
          });
        }
        this.#answered(entry, undefined);
      },
      (error: unknown) => this.#failed(entry, error),
    );
  }

  /** The first answer of a start names the sequence, also when the client chose the id. */
  #named(response: InferResponse): InferResponse {
    this.#id ??= answeredId(response);
    if (this.#ownerKey === undefined && this.#id !== undefined) this.#claim(this.#id, "ifFree");
    if (response.parameters.sequence_id !== undefined || this.#id === undefined) return response;
    return { ...response, parameters: { ...response.parameters, sequence_id: this.#id } };
  }

  #push(entry: StreamEntry, response: InferResponse): void {
    let data: string | Buffer;
    try {
      data = this.#encode(response, entry.encoding!);
    } catch (error) {
      data = errorText(asServerError(error).message, entry.requestId);
    }
    this.#hold(entry, data);
  }

  /** The entry's one answer: it is complete. */
  #answer(entry: StreamEntry, data: string | Buffer): void {
    this.#hold(entry, data);
    entry.complete = true;
  }

  /**
   * Keeps an answer until its turn to be sent, counted in the connection's budget; an
   * answer the budget has no room for is dropped and the stream ends (its client is not
   * reading what it asked for).
   */
  #hold(entry: StreamEntry, data: string | Buffer, binary = typeof data !== "string"): void {
    if (this.#closing) return;
    const size = sizeOf(data);
    if (!this.#budget.take(size)) {
      this.#overflow();
      return;
    }
    entry.answers.push({ data, size, binary });
  }

  #overflow(): void {
    const message = `the client is not reading its answers: ${this.#budget.refusal}`;
    if (this.#sequences !== undefined && !this.#over && this.#drives && this.#id !== undefined) {
      this.#endSequence("cancelled");
    }
    this.#over = true;
    this.#close(CLOSE_CODES.policyViolation, message);
  }

  /**
   * No message and no answer taken by the client for the idle timeout: closed unless a
   * request is still being worked on. A client that has stopped reading does not keep the
   * stream, its sequence and its slot by leaving requests in flight.
   */
  readonly #onIdle = (): void => {
    if (this.#closing) return;
    // Answers handed to the socket and not taken (#sentSizes) for the whole idle time: the
    // client has stopped reading. Otherwise a request in flight is still being worked on.
    if (this.#waiting.length + this.#answering.length > 0 && this.#sentSizes.length === 0) {
      this.#idleTimer?.refresh();
      return;
    }
    this.#limits.onIdleClose?.();
    this.#close(CLOSE_CODES.goingAway, "the stream was idle");
  };

  /** A request is answered (`response`: its one answer; undefined: a decoupled request's responses were sent). */
  #answered(entry: StreamEntry, response: InferResponse | undefined): void {
    this.#running--;
    if (entry.starts) {
      this.#startRunning = false;
      if (response !== undefined) this.#id ??= answeredId(response);
      if (this.#ownerKey === undefined && this.#id !== undefined) this.#claim(this.#id, "ifFree");
    }
    if (this.#closed) {
      // The client left while the start ran: end the sequence its answer names.
      if (this.#lateEnd !== undefined) this.#endSequence(this.#lateEnd);
      this.#leave();
      return;
    }
    if (entry.starts) this.#established = true;
    else this.#stepped = true;
    const encoded = response === undefined ? undefined : this.#encodeAnswer(entry, response);
    if (encoded instanceof Promise) {
      // A large JSON answer, written on the JSON thread: sent in its turn once written.
      encoded
        .then(
          (json) => this.#hold(entry, json.body, false),
          (error: unknown) => this.#hold(entry, errorText(asServerError(error).message, entry.requestId)),
        )
        .then(() => {
          entry.complete = true;
          if (!this.#closing) this.#advance();
        });
    } else {
      if (encoded !== undefined) this.#hold(entry, encoded);
      entry.complete = true;
    }
    if (entry.ends) {
      this.#over = true;
      entry.closeCode = CLOSE_CODES.sequenceEnded;
      entry.closeText = "sequence ended";
    }
    this.#advance();
  }

  #failed(entry: StreamEntry, error: unknown): void {
    this.#running--;
    if (entry.starts) this.#startRunning = false;
    if (this.#closed) return;
    const failure = asServerError(error);
    if (failure.code === "INTERNAL" || failure.code === "UNKNOWN") {
      this.#logger.error(
        { err: error, model: this.#model.name, requestId: entry.requestId },
        failure.message,
      );
    }
    // A model no longer served (unloaded) is said so, and the stream closes: none of its
    // messages can be served.
    const unserved = this.#unserved();
    // The core's words for a sequence it does not know ask for a START flag, which a
    // stream's messages may not carry: what the client can do is open a new stream.
    const message =
      unserved !== undefined
        ? `${unserved.message}: the model is no longer served (unloaded); open a new stream once it is loaded again`
        : this.#established && isStartMissing(failure)
          ? `sequence ${String(this.#id)} of model '${this.#model.name}' no longer exists (ended by its idle timeout, a DELETE, or an END sent elsewhere): open a new stream to start it again`
          : failure.message;
    this.#answer(entry, errorText(message, entry.requestId));
    if (unserved !== undefined) {
      this.#stopped = true;
      this.#over = true;
      entry.closeCode = this.#sequences === undefined ? CLOSE_CODES.goingAway : CLOSE_CODES.sequenceGone;
      entry.closeText = "the model is no longer served";
    } else if (entry.ends) {
      // The client asked for the end: the sequence ends whether or not its last request ran.
      if (this.#established) this.#endSequence("end");
      this.#over = true;
      entry.closeCode = CLOSE_CODES.sequenceEnded;
      entry.closeText = "sequence ended";
    } else if (this.#established && this.#sequences !== undefined && isSequenceGone(failure)) {
      this.#stopped = true;
      this.#over = true;
      entry.closeCode = CLOSE_CODES.sequenceGone;
      entry.closeText = message;
    }
    // A failed start leaves no sequence (the core ends one it began): the next message
    // starts it again.
    this.#advance();
  }

  #encode(response: InferResponse, encoding: OutputEncoding): string | Buffer {
    return framed(encodeInferResponse(response, encoding, FRAME_PREFIX_BYTES));
  }

  /**
   * A request's one answer as a message (a start's names the sequence); one that cannot be
   * encoded, the error. A JSON answer of OFF_THREAD_JSON_ELEMENTS elements or more is
   * written on the JSON thread, as UTF-8 bytes for a text frame (a promise only then).
   */
  #encodeAnswer(
    entry: StreamEntry,
    response: InferResponse,
  ): string | Buffer | Promise<EncodedInferResponse> {
    const answer = entry.starts ? this.#named(response) : response;
    try {
      const encoded = encodeInferResponseOffThread(answer, entry.encoding!, FRAME_PREFIX_BYTES);
      return encoded instanceof Promise ? encoded : framed(encoded);
    } catch (error) {
      return errorText(asServerError(error).message, entry.requestId);
    }
  }

  /** Sends the answers that are ready, in arrival order. */
  #flush(): void {
    while (!this.#closing) {
      const entry = this.#answering.peek();
      if (entry === undefined) return;
      if (entry.endMessage) this.#endByMessage(entry);
      for (const answer of entry.answers.splice(0)) this.#send(answer);
      this.#release(entry);
      if (!entry.complete) return;
      this.#answering.shift();
      this.#heldRequestBytes -= entry.bytes;
      if (entry.closeCode !== undefined) this.#close(entry.closeCode, entry.closeText);
    }
  }

  /** A decoupled request's next response may come once this one's are on their way. */
  #release(entry: StreamEntry): void {
    if (entry.sent === undefined || entry.answers.length > 0 || (this.#writeBlocked && !this.#closing))
      return;
    const sent = entry.sent;
    entry.sent = undefined;
    sent();
  }

  /** Its turn comes once every earlier message is answered, so ending cancels nothing. */
  #endByMessage(entry: StreamEntry): void {
    const id = this.#established ? this.#id : undefined;
    if (id !== undefined) {
      this.#endSequence("end", true);
      this.#owners.drove(this);
    }
    this.#over = true;
    this.#answer(entry, endText(id));
    entry.closeCode = CLOSE_CODES.sequenceEnded;
    entry.closeText = "sequence ended";
  }

  /**
   * A start with the client's id took it: the core has restarted any sequence another
   * stream held under it. (A start it refused, say an invalid one or one with another
   * caller's id, left that sequence and its stream alone.) A stream already closed claims
   * nothing: its aborted signal makes the core cancel the start, which ends the sequence.
   */
  readonly #startTaken = (): void => {
    if (!this.#closed && this.#id !== undefined) this.#claim(this.#id, "start");
  };

  /**
   * Claims the sequence's id for this stream: for a start with the client's id, once the
   * core has taken the start, whoever held it; for a stream continuing a sequence, whoever
   * held it, until this stream leaves without driving it; for a server-assigned id only if
   * no stream has taken it meanwhile.
   */
  #claim(id: SequenceId, how: "start" | "continue" | "ifFree"): void {
    const key = SequenceOwners.key(this.#model, id);
    this.#ownerKey = key;
    if (how === "start") this.#owners.claim(key, this);
    else if (how === "continue") this.#owners.claimToContinue(key, this);
    else this.#owners.claimIfFree(key, this);
  }

  /**
   * Ends the sequence, unless another stream has started its id since, or taken it to
   * continue it: a stream that leaves ends only a sequence it holds. The client's own end
   * (`asked`) ends one the stream still steers, taken by a stream that has not driven it.
   * A stream leaving one it steers without holding it leaves its end to the taker: it ends
   * the sequence so if it leaves without driving it (#leave), as this close alone would.
   */
  #endSequence(reason: SequenceEndReason, asked = false): void {
    const key = this.#ownerKey;
    if (key === undefined || this.#id === undefined) return;
    if (asked ? this.#owners.steers(key, this) : this.#owners.owns(key, this)) {
      this.#sequences?.end(this.#id, reason);
    } else if (!asked && this.#owners.steers(key, this)) {
      this.#owners.leftEnding(this, reason);
    }
  }

  /**
   * The stream has left: a sequence it holds goes back to the stream it took it from, or,
   * none open, ends with the end the stream that drove it asked on leaving meanwhile.
   */
  #leave(): void {
    if (this.#ownerKey === undefined) return;
    const ending = this.#owners.release(this.#ownerKey, this);
    if (ending !== undefined && this.#id !== undefined) this.#sequences?.end(this.#id, ending);
  }

  /** Another stream started this sequence's id again: the sequence is no longer this stream's. */
  #takenOver(entry: StreamEntry): void {
    const message = `sequence ${formatSequenceId(this.#id!)} of model '${this.#model.name}' was started again by another stream`;
    this.#answer(entry, errorText(message, entry.requestId));
    entry.closeCode = CLOSE_CODES.sequenceGone;
    entry.closeText = message;
    this.#stopped = true;
    this.#over = true;
  }

  #send(answer: HeldAnswer): void {
    this.#sentSizes.push(answer.size);
    this.#socket.send(answer.data, { binary: answer.binary }, this.#onSent);
    if (this.#socket.bufferedAmount > this.#limits.writeHighWaterBytes) this.#writeBlocked = true;
  }

  /** Called as each answer reaches the socket: reading resumes once the backlog halves. */
  readonly #onSent = (): void => {
    this.#budget.give(this.#sentSizes.shift() ?? 0);
    // The client is reading: the stream is not idle.
    this.#idleTimer?.refresh();
    if (!this.#writeBlocked || this.#socket.bufferedAmount > this.#limits.writeHighWaterBytes / 2) return;
    this.#writeBlocked = false;
    const head = this.#answering.peek();
    if (head !== undefined) this.#release(head);
    this.#updateFlow();
  };

  #updateFlow(): void {
    if (this.#closing) return;
    const full =
      this.#writeBlocked ||
      this.#budget.saturated ||
      this.#heldRequestBytes >= this.#limits.maxHeldRequestBytes ||
      this.#waiting.length + this.#answering.length >= this.#limits.maxInFlight;
    if (full === this.#paused) return;
    this.#paused = full;
    if (full) this.#socket.pause();
    else this.#socket.resume();
  }

  #close(code: number, reason: string): void {
    if (this.#closing) return;
    this.#closing = true;
    this.#stopped = true;
    // The client's close frame has to be read for the closing handshake to finish.
    if (this.#paused) {
      this.#paused = false;
      this.#socket.resume();
    }
    this.#socket.close(code, closeReason(reason));
  }

  #onClose(code: number): void {
    if (this.#idleTimer !== undefined) clearTimeout(this.#idleTimer);
    this.#stopWatchingBudget();
    this.#budget.release();
    this.#closed = true;
    this.#closing = true;
    this.#stopped = true;
    if (this.#sequences !== undefined && !this.#over && (this.#drives || this.#startRunning)) {
      const reason: SequenceEndReason = isDeliberateClose(code) ? "end" : "cancelled";
      if (this.#id !== undefined) this.#endSequence(reason);
      else this.#lateEnd = reason;
    }
    this.#leave();
    // Requests not yet run fail (those of an ended sequence already have): nobody is left to
    // answer; decoupled requests running are cancelled (their model is told).
    this.#controller.abort(cancelled("the client closed the stream"));
    this.#waiting.drain();
    for (const entry of this.#answering.drain()) {
      entry.sent?.();
      entry.sent = undefined;
    }
  }
}
