import { setMaxListeners } from "node:events";
import type { MetadataValue, ServerDuplexStream } from "@grpc/grpc-js";
import { failedAfterAdmission } from "../../core/admitted-failure.ts";
import { asServerError, cancelled, ServerError, unavailable } from "../../core/errors.ts";
import type { InferRequest, InferResponse, SequenceId } from "../../core/infer.ts";
import type { ModelRegistry, ServedModel } from "../../core/model.ts";
import type { Refusals } from "../../core/refusals.ts";
import { inferStream } from "../../core/response-stream.ts";
import { OrderedRelease } from "../../core/scheduler/ordered-release.ts";
import { Deque } from "../../core/scheduler/request-queue.ts";
import type { SharedMemoryRegions } from "../../core/shared-memory.ts";
import { timerDelay } from "../../core/timer-delay.ts";
import type { Logger } from "../../observability/logger.ts";
import { type AssignedSequence, assignedSequence, endUnreachable } from "../common/assigned-sequence.ts";
import { cutToBytes } from "../common/cut-text.ts";
import { type Classification, classificationFor, classifyOutputs } from "../common/kserve/classification.ts";
import { relayResponses, type WaitingResponses } from "../common/kserve/decoupled-responses.ts";
import type { SharedMemoryHold } from "../common/kserve/shared-memory-tensors.ts";
import type { ConnectionBudget } from "../common/response-budget.ts";
import { withRoutedSequenceId } from "../common/sequence-routing.ts";
import { withTraceContext } from "../common/trace-context.ts";
import { type GrpcErrorStatus, statusOf } from "./error-status.ts";
import { decodeInferRequest } from "./infer-request-decoder.ts";
import { encodeInferResponse, streamError } from "./infer-response-encoder.ts";
import type { ModelInferRequestMessage, ModelStreamInferResponseMessage } from "./messages.ts";
import { encodeStreamInferResponse } from "./proto-definitions.ts";
import { resetCall } from "./reset-stream.ts";
import { namedSequenceId, SequenceOrders } from "./sequence-orders.ts";
import { SlotWaits } from "./slot-waits.ts";

// One ModelStreamInfer call. Requests start as they arrive, so many requests (of many
// sequences) are in flight on one stream, and their answers are written in the order the
// requests came, as Triton writes a stream's responses: clients match answers to requests
// by position, and a request of one sequence that finishes early (another sequence's
// request waits for a slot) waits for the answers before it. A failed request is answered
// in-band (error_message + its id), in its turn, and the stream stays open. A client that
// matches answers by their request id may ask for them as they complete instead (the call's
// metadata `seqserve-stream-order: sequence`): each sequence's answers still come in its
// own order, and a request waiting for a slot holds back no other sequence's answers.
//
// A client that opens the stream with Triton's metadata `triton_grpc_error: true` asks for
// errors as gRPC statuses instead: the first request the model had taken that fails (its
// run failed, its wait ran out) ends the call, in its turn, with that error's status (its
// code through KServe's table, its message), as Triton ends it; what the end does to the
// stream's other requests is what any end of the stream does (see Cancellation). A request
// refused before its model took it (a check, a sequence's admission, a full queue) is still
// answered in-band, as Triton's stream answers the errors it meets before issuing a request.
//
// A decoupled model's request is answered by each of its responses as they come (its
// model decides their order and number); it counts as in flight until its last.
//
// Memory: every answer is encoded as soon as it exists and counted in the connection's
// byte budget (response-budget.ts) until grpc-js has handed it to HTTP/2; answers are
// handed over one at a time, so those a client does not read wait here, counted, not in
// grpc-js's queue. A decoupled request's responses count from when they arrive, before
// they are taken (decoupled-responses.ts). Reading stops while `maxInflight` requests are
// unanswered (or they hold `maxHeldRequestBytes`) or while the connection's budget is half
// used; a decoupled request's next response waits while answers wait to be written. Not
// counted against `maxInflight` and `maxHeldRequestBytes`: a request waiting for its
// sequence to get a slot (the server's budget of waiting requests bounds it), and one the
// core has answered whose answer waits for its turn (the connection's budget holds the
// answer). Counted, the backlogged STARTs of a stream carrying more sequences than the
// model has slots, and the answers behind them, kept the ENDs that free the slots from
// being read (slot-waits.ts). A request still counted has a slot or needs none (unless
// its sequence waits behind a START another stream sent): it needs no further read of
// this stream to be answered. An answer that would take the connection past its budget
// ends the stream (RESOURCE_EXHAUSTED), and its requests in flight are cancelled.
// Time: an answer grpc-js has not handed to HTTP/2 within `stallTimeoutMs` (the client's
// flow-control window stayed shut) means the client has stopped reading: the stream is
// reset (a status would wait behind the unread answers), what it held is given back, and
// its requests in flight are cancelled, as with the budget.
//
// Cancellation: when the call is cancelled or the connection breaks, every request still
// in flight has its signal aborted; the core fails those not yet run with CANCELLED. The
// requests of a stream share one signal: a request already answered no longer listens
// to it (the core removes its listener when the request settles), and one AbortController
// per message would be a measurable part of the per-message cost. A request that has run
// but whose answer was not written yet (it waited for the answers before it) is not
// cancelled: its step was applied, and its sequence goes on without that answer, as in
// Triton (a completed request leaves the stream's in-flight set, and its response is just
// not written). Its client learns the sequence's state from its next step, or, for a step
// numbered with `sequence_step`, gets that answer again by sending the step again. Not so
// a START sent without an id: the server assigned one, and only its answer names it
// (`sequence_id`). Not delivered (the stream closed, or ended for want of budget), it
// leaves a sequence nobody can reach, holding its slot and state until its idle timeout:
// that sequence ends (reason `cancelled`), as the WebSocket stream ends a sequence it
// started when its client leaves.

// Responses: errors go out as messages; successful answers already encoded (see #prepare).
/**
 * Answers waiting to be written beyond which the client is taken to be behind: reading
 * stops, and a decoupled request's next response waits (grpc-js's own high-water mark).
 */
const WRITE_HIGH_WATER = 16;

export type StreamInferCall = ServerDuplexStream<
  ModelInferRequestMessage,
  ModelStreamInferResponseMessage | Uint8Array
>;

/** An answer ready to go: encoded and counted in the budget. */
interface Outgoing {
  readonly message: ModelStreamInferResponseMessage | Uint8Array;
  readonly bytes: number;
  /** The status the call ends with instead, in the answer's turn (`triton_grpc_error`). */
  readonly endsCall?: GrpcErrorStatus;
  /** The sequence the server gave the START it answers, sent without an id: the answer alone names it. */
  readonly assigned?: AssignedSequence;
}

/** What an in-band error holds: its text, its request's id and model, and the message around them. */
const errorBytes = (message: ModelStreamInferResponseMessage): number =>
  (message.error_message?.length ?? 0) +
  (message.infer_response?.id?.length ?? 0) +
  (message.infer_response?.model_name?.length ?? 0) +
  48;

export interface StreamInferOptions {
  readonly maxInflight: number;
  readonly maxMessageBytes: number;
  /** The connection's budget of answers waiting to be sent. */
  readonly budget: ConnectionBudget;
  /** The caller (its API key's name). */
  readonly principal?: string | undefined;
  /** The sequence the call's metadata names (a balancer routes the whole stream by it): its requests may leave the id out. */
  readonly routedId?: SequenceId | undefined;
  /** Answers in request order (Triton's); false: as they complete (each sequence's in its order). */
  readonly requestOrder?: boolean;
  /** How long an answer may wait for the client to take it before the stream is reset; default never. */
  readonly stallTimeoutMs?: number | undefined;
  /** Request bytes held unanswered beyond which reading stops (--max-held-request-bytes); default unbounded. */
  readonly maxHeldRequestBytes?: number | undefined;
  readonly refusals?: Refusals | undefined;
  /** Where tensors may be read from and written to shared memory; unset, such requests are refused. */
  readonly sharedMemory?: SharedMemoryRegions | undefined;
}

/** A model as a request named it (Triton's stream echoes these, not the version that ran). */
interface NamedModel {
  readonly modelName: string;
  readonly modelVersion: string;
}

function namedAs(message: ModelInferRequestMessage): NamedModel {
  return { modelName: message.model_name ?? "", modelVersion: message.model_version ?? "" };
}

/**
 * The tensor bytes a request holds: its raw contents, and its typed contents as the
 * decoder holds them (typed arrays; bytes elements at their length). What it reads
 * from shared memory is bounded server-wide instead (--max-shared-memory-bytes), by the
 * bytes actually read: the size a request names is not checked yet here, and a huge one
 * would round the stream's count off.
 */
function heldBytes(message: ModelInferRequestMessage): number {
  let bytes = 0;
  for (const raw of message.raw_input_contents ?? []) bytes += raw.byteLength;
  for (const input of message.inputs ?? []) {
    const contents = input.contents;
    if (contents === undefined || contents === null) continue;
    // Numbers are one typed array a field: only bytes elements need a look each.
    for (const values of Object.values(contents) as unknown[]) {
      if (ArrayBuffer.isView(values)) bytes += values.byteLength;
      else if (Array.isArray(values))
        for (const value of values as readonly Uint8Array[]) bytes += value.byteLength;
    }
  }
  return bytes;
}

/** The metadata that asks for answers as they complete rather than in request order. */
export const STREAM_ORDER_METADATA = "seqserve-stream-order";

/** Triton's metadata that asks for a failed request to end the stream with its gRPC status (value "true"). */
export const TRITON_GRPC_ERROR_METADATA = "triton_grpc_error";

export class StreamInferSession {
  readonly #call: StreamInferCall;
  readonly #routedId: SequenceId | undefined;
  readonly #registry: ModelRegistry;
  readonly #logger: Logger;
  readonly #maxInflight: number;
  readonly #maxMessageBytes: number;
  readonly #sharedMemory: SharedMemoryRegions | undefined;
  readonly #traceparent: MetadataValue | undefined;
  readonly #tracestate: MetadataValue | undefined;
  readonly #budget: ConnectionBudget;
  /** A decoupled request's responses not yet taken count in the budget too. */
  readonly #waitingResponses: WaitingResponses;
  readonly #principal: string | undefined;
  readonly #requestOrder: boolean;
  /** A failure after admission ends the call with its status (`triton_grpc_error: true`). */
  readonly #errorEndsCall: boolean;
  readonly #stopWatchingBudget: () => void;
  /** Aborts the requests in flight when the stream goes away. */
  readonly #controller = new AbortController();
  /** Answers leave in request order. */
  readonly #order = new OrderedRelease();
  /** As they complete: each sequence's answers in its order (sequence-orders.ts). */
  readonly #sequenceOrders = new SequenceOrders();
  /** Answers whose turn has come, waiting for the one being written. */
  readonly #outbox = new Deque<Outgoing>();
  /** The answer with grpc-js (written, its callback not yet called). */
  #inWrite: Outgoing | undefined;
  /** Requests accepted and not yet answered. */
  #inflight = 0;
  /** Tensor bytes of the requests received and not yet answered: a count alone bounds nothing. */
  #heldRequestBytes = 0;
  /** Of those requests and bytes, what waits for a sequence slot: the limits leave them out. */
  readonly #slotWaits = new SlotWaits(() => this.#updateFlow());
  /** Of those, the requests the core has answered whose answers wait for their turn: left out too. */
  #awaitingTurn = 0;
  #awaitingTurnBytes = 0;
  readonly #maxHeldRequestBytes: number;
  /** Decoupled requests waiting for the outbox to empty before their next response. */
  #drainWaiters: Promise<void> | undefined;
  #releaseDrain: (() => void) | undefined;
  #paused = false;
  #readEnded = false;
  #closed = false;
  /** Closed while an answer was with grpc-js: the budget is released when it is done with. */
  #releasePending = false;
  readonly #stallTimeoutMs: number | undefined;
  readonly #refusals: Refusals | undefined;
  /** When the answer with grpc-js was handed over (performance.now()). */
  #writeStartedAt = 0;
  /** Armed while an answer is with grpc-js; re-armed for what is left rather than per answer. */
  #stallTimer: NodeJS.Timeout | undefined;

  constructor(call: StreamInferCall, registry: ModelRegistry, logger: Logger, options: StreamInferOptions) {
    this.#call = call;
    this.#routedId = options.routedId;
    this.#registry = registry;
    this.#logger = logger;
    this.#maxInflight = Math.max(1, options.maxInflight);
    this.#maxHeldRequestBytes = options.maxHeldRequestBytes ?? Number.POSITIVE_INFINITY;
    this.#maxMessageBytes = options.maxMessageBytes;
    this.#sharedMemory = options.sharedMemory;
    this.#budget = options.budget;
    this.#waitingResponses = {
      budget: this.#budget,
      overflow: () => {
        if (!this.#closed) this.#overflow();
      },
    };
    this.#principal = options.principal;
    this.#requestOrder = options.requestOrder ?? true;
    this.#stallTimeoutMs = options.stallTimeoutMs;
    this.#refusals = options.refusals;
    this.#stopWatchingBudget = this.#budget.onRoom(() => {
      this.#writeNext();
      this.#updateFlow();
    });
    // The stream's trace context (its call's metadata) goes with each of its requests.
    [this.#traceparent] = call.metadata.get("traceparent");
    [this.#tracestate] = call.metadata.get("tracestate");
    // Triton takes the value "true" only, as it is.
    this.#errorEndsCall = call.metadata.get(TRITON_GRPC_ERROR_METADATA)[0] === "true";
    // One listener per request in flight, so up to maxInflight: not a leak.
    setMaxListeners(0, this.#controller.signal);
    call.on("data", (message: ModelInferRequestMessage) => this.#accept(message));
    call.on("end", () => {
      this.#readEnded = true;
      this.#maybeFinish();
    });
    call.on("cancelled", () => this.#abandon("the client cancelled the stream"));
    call.on("error", (error: Error) => {
      this.#logger.debug({ err: error }, "ModelStreamInfer stream failed");
      this.#abandon("the stream failed");
    });
    call.on("close", () => this.#abandon("the stream closed"));
    if (call.cancelled) this.#abandon("the client cancelled the stream");
  }

  #accept(message: ModelInferRequestMessage): void {
    // Read whole now: Triton's GRPC_WAITREAD_START and _END, for tracing.
    const readNs = performance.now() * 1e6;
    this.#inflight++;
    const bytes = heldBytes(message);
    this.#heldRequestBytes += bytes;
    let sharedOutputs: SharedMemoryHold | undefined;
    let slotWaitEnded: (() => void) | undefined;
    let awaitsTurn = false;
    // The core has answered it: its answer, held in the connection's budget, waits for its
    // turn, and the request no longer counts against the stream's limits. Counted, the
    // answers waiting behind a START that waits for a slot stopped reading as well.
    const settled = (): void => {
      slotWaitEnded?.();
      if (awaitsTurn) return;
      awaitsTurn = true;
      this.#awaitingTurn++;
      this.#awaitingTurnBytes += bytes;
      this.#updateFlow();
    };
    const answered = (): void => {
      sharedOutputs?.use.release();
      slotWaitEnded?.();
      if (awaitsTurn) {
        this.#awaitingTurn--;
        this.#awaitingTurnBytes -= bytes;
      }
      this.#answered(bytes);
    };
    this.#updateFlow();
    // In request order every request takes its place now; as they complete, a request of a
    // sequence takes one in its sequence's order once its sequence is known.
    let order = this.#requestOrder ? this.#order : undefined;
    let turn = order === undefined ? -1 : order.issue();
    let pending: Promise<InferResponse>;
    let model: ServedModel | undefined;
    let request: InferRequest | undefined;
    try {
      // The model first, as Triton finds it before reading the inputs (and shared memory's
      // inputs are checked against it before they are read).
      const version = message.model_version;
      model = this.#registry.model(message.model_name ?? "", version === "" ? undefined : version);
      const decoded = decodeInferRequest(message, model, {
        signal: this.#controller.signal,
        principal: this.#principal,
        sharedMemory: this.#sharedMemory,
        received: { frontend: "GRPC", startNs: readNs, endNs: readNs },
      });
      sharedOutputs = decoded.sharedMemory;
      const classification = classificationFor(model, decoded.classification);
      const slotWait = this.#slotWaits.track(
        model,
        withTraceContext(
          withRoutedSequenceId(decoded.request, this.#routedId, model),
          this.#traceparent,
          this.#tracestate,
        ),
        bytes,
      );
      request = slotWait.request;
      slotWaitEnded = slotWait.answered;
      if (model.decoupled === true) {
        // Its responses go out as they come: it holds no place in the order.
        order?.complete(turn, () => {});
        this.#relay(model, request, message, answered, { classification, sharedMemory: sharedOutputs });
        return;
      }
      if (!this.#requestOrder) {
        order = this.#sequenceOrders.of(model, request.sequence?.id);
        if (order !== undefined) turn = order.issue();
      }
      const answer = model.infer(request);
      pending =
        classification === undefined
          ? answer
          : answer.then((response) => classifyOutputs(response, classification));
    } catch (error) {
      // Refused before it took a place in its sequence's order: it takes one now, behind
      // the requests of its sequence still waiting. Its id is read from the message when it
      // was refused before that; one that cannot be read is answered at once.
      if (order === undefined && !this.#requestOrder) {
        const routed = model?.sequences === undefined ? undefined : this.#routedId;
        order = this.#sequenceOrders.of(model, namedSequenceId(message) ?? routed);
        if (order !== undefined) turn = order.issue();
      }
      this.#answerInTurn(order, turn, this.#failure(error, message.id), answered, settled);
      return;
    }
    pending.then(
      (response) =>
        this.#answerInTurn(
          order,
          turn,
          this.#prepare(response, message.id, sharedOutputs, assignedSequence(model, request, response)),
          answered,
          settled,
        ),
      (error: unknown) =>
        this.#answerInTurn(
          order,
          turn,
          this.#failure(error, message.id, failedAfterAdmission(error) ? namedAs(message) : undefined),
          answered,
          settled,
        ),
    );
  }

  /** Writes the answer once every request before `turn` in `order` has been answered (no order: at once). */
  #answerInTurn(
    order: OrderedRelease | undefined,
    turn: number,
    outgoing: Outgoing | undefined,
    answered: () => void,
    settled: () => void,
  ): void {
    const write = (): void => {
      if (outgoing !== undefined) this.#send(outgoing);
      answered();
    };
    if (order === undefined) write();
    else {
      settled();
      order.complete(turn, write);
    }
  }

  /**
   * A decoupled model's request: each response is written as it comes (Triton's
   * `triton_final_response` on each); the next waits while answers wait to be written.
   */
  #relay(
    model: ServedModel,
    request: InferRequest,
    message: ModelInferRequestMessage,
    answered: () => void,
    outputs: { classification: Classification | undefined; sharedMemory: SharedMemoryHold | undefined },
  ): void {
    const requestId = message.id;
    const stream = inferStream(model, request);
    // A server-assigned id is told by the first response that names it.
    let idTold = false;
    relayResponses(
      model,
      stream,
      request,
      (response) => {
        if (this.#closed) {
          stream.cancel();
          return undefined;
        }
        const assigned = idTold ? undefined : assignedSequence(model, request, response);
        if (assigned !== undefined) idTold = true;
        const outgoing = this.#prepare(
          classifyOutputs(response, outputs.classification),
          requestId,
          outputs.sharedMemory,
          assigned,
        );
        if (outgoing === undefined) {
          stream.cancel();
          return undefined;
        }
        this.#send(outgoing);
        this.#updateFlow();
        return this.#outbox.length >= WRITE_HIGH_WATER || this.#budget.saturated
          ? this.#drained()
          : undefined;
      },
      this.#waitingResponses,
      namedAs(message),
    ).then(answered, (error: unknown) => {
      const outgoing = this.#failure(
        error,
        requestId,
        failedAfterAdmission(error) ? namedAs(message) : undefined,
      );
      if (outgoing !== undefined) this.#send(outgoing);
      answered();
    });
  }

  /** Resolves once the answers waiting to be written have been. */
  #drained(): Promise<void> {
    this.#drainWaiters ??= new Promise<void>((resolve) => {
      this.#releaseDrain = resolve;
    });
    return this.#drainWaiters;
  }

  /**
   * The response as it goes out, counted in the budget (or an in-band error when it cannot
   * be encoded). Encoded here rather than by grpc-js on write: a message over the send limit
   * (or one that fails to encode) makes grpc-js end the whole call, which would fail every
   * other request in flight on the stream and cancel their sequences' queued work. Seen
   * here, it is refused in-band like any other error and the stream goes on. Undefined when
   * the stream is gone or has just ended for want of budget.
   */
  #prepare(
    response: InferResponse,
    requestId: string | undefined,
    sharedMemory: SharedMemoryHold | undefined,
    assigned?: AssignedSequence,
  ): Outgoing | undefined {
    let message: ModelStreamInferResponseMessage | Uint8Array;
    let bytes: number;
    let answered = false;
    try {
      // Every answer says whether it is its request's last, as Triton's stream says it of
      // every response (clients count requests done by it): a decoupled model's responses
      // come flagged; the one answer of any other model is its last.
      const final =
        response.parameters.triton_final_response === undefined
          ? { ...response, parameters: { ...response.parameters, triton_final_response: true } }
          : response;
      const encoded = encodeStreamInferResponse({
        infer_response: encodeInferResponse(final, sharedMemory),
      });
      // A negative limit is grpc-js's "unlimited".
      if (this.#maxMessageBytes >= 0 && encoded.byteLength > this.#maxMessageBytes) {
        message = this.#inBandError(
          `the response is larger than the server's maximum gRPC message size (${encoded.byteLength} vs. ${this.#maxMessageBytes} bytes)`,
          requestId,
        );
        bytes = errorBytes(message);
      } else {
        message = encoded;
        bytes = encoded.byteLength;
        answered = true;
      }
    } catch (error) {
      message = this.#inBandError(asServerError(error).message, requestId);
      bytes = errorBytes(message);
    }
    if (!answered) {
      // The error sent in its place does not name the id the server gave: nobody can
      // reach that sequence.
      endUnreachable(assigned);
      return this.#hold({ message, bytes });
    }
    return this.#hold({ message, bytes, ...(assigned === undefined ? {} : { assigned }) });
  }

  /**
   * An error answered in-band. `admittedBy`: the model that took the request before it
   * failed, as the request named it; Triton's stream then names it so and flags the answer
   * final, as a response, or, asked to (`triton_grpc_error`), ends the call with it.
   */
  #failure(error: unknown, requestId: string | undefined, admittedBy?: NamedModel): Outgoing | undefined {
    const serverError = asServerError(error);
    if (serverError.code === "INTERNAL" || serverError.code === "UNKNOWN") {
      this.#logger.error({ err: error, requestId }, "ModelStreamInfer request failed");
    }
    const inBand = this.#inBandError(serverError.message, requestId);
    const message: ModelStreamInferResponseMessage =
      admittedBy === undefined
        ? inBand
        : {
            ...inBand,
            infer_response: {
              ...inBand.infer_response,
              model_name: admittedBy.modelName,
              model_version: admittedBy.modelVersion,
              parameters: { triton_final_response: { bool_param: true } },
            },
          };
    const endsCall = admittedBy !== undefined && this.#errorEndsCall ? statusOf(serverError) : undefined;
    return this.#hold({
      message,
      bytes: errorBytes(message),
      ...(endsCall === undefined ? {} : { endsCall }),
    });
  }

  /**
   * An error answered in-band, cut to the server's send limit: grpc-js ends the whole call
   * for a message over it, and an error can echo a long model name or request id.
   */
  #inBandError(text: string, requestId: string | undefined): ModelStreamInferResponseMessage {
    const limit = this.#maxMessageBytes;
    const message = streamError(text, requestId);
    // A negative limit is grpc-js's "unlimited"; 32 bytes cover the fields' tags and lengths.
    if (limit < 0 || Buffer.byteLength(text) + Buffer.byteLength(requestId ?? "") + 32 <= limit)
      return message;
    // A long id is left out first (the text says why the request failed), then the text
    // is cut.
    const id = requestId !== undefined && Buffer.byteLength(requestId) <= limit / 4 ? requestId : "";
    const room = Math.max(0, limit - Buffer.byteLength(id) - 32);
    return streamError(cutToBytes(text, room), id);
  }

  /**
   * Counts an answer in the budget; past it, the stream ends and the answer is dropped.
   * An answer dropped (here, or once the stream is gone) ends nothing: its step ran, and
   * its sequence goes on, as Triton's does (see Cancellation above); unless it was to tell
   * its client the id the server gave its START (#dropped).
   */
  #hold(outgoing: Outgoing): Outgoing | undefined {
    if (!this.#closed && this.#budget.take(outgoing.bytes)) return outgoing;
    if (!this.#closed) this.#overflow();
    this.#dropped(outgoing);
    return undefined;
  }

  /**
   * An answer that will not reach its client. One naming the id the server gave a START
   * sent without one leaves a sequence its client cannot reach: it ends, as cancelled,
   * rather than hold its slot and state until its idle timeout (assigned-sequence.ts).
   */
  #dropped(outgoing: Outgoing): void {
    endUnreachable(outgoing.assigned);
  }

  #send(outgoing: Outgoing): void {
    if (this.#closed) {
      this.#budget.give(outgoing.bytes);
      this.#dropped(outgoing);
      return;
    }
    this.#outbox.push(outgoing);
    this.#writeNext();
  }

  /** Hands the next answer to grpc-js once it has taken the previous one. */
  #writeNext(): void {
    if (this.#inWrite !== undefined || this.#closed) return;
    const next = this.#outbox.shift();
    if (this.#outbox.length < WRITE_HIGH_WATER / 2 && !this.#budget.saturated) {
      const release = this.#releaseDrain;
      this.#drainWaiters = undefined;
      this.#releaseDrain = undefined;
      release?.();
    }
    if (next === undefined) {
      this.#maybeFinish();
      return;
    }
    if (next.endsCall !== undefined) {
      this.#budget.give(next.bytes);
      this.#endWithError(next.endsCall);
      return;
    }
    this.#inWrite = next;
    this.#watchForStall();
    this.#call.write(next.message, () => {
      // Called back after the stream closed, the answer may never have reached the client.
      if (!this.#writeDone(next, !this.#closed) || this.#closed) return;
      this.#writeNext();
      this.#updateFlow();
    });
  }

  /**
   * The answer with grpc-js is done with: written (its callback), or gone with the call.
   * grpc-js does not call back a write it refuses on a call it has ended itself (a
   * deadline, a message over its limit), so the call's end settles it too, once. False
   * when it was settled already. `delivered`: written before the call ended.
   */
  #writeDone(outgoing: Outgoing, delivered: boolean): boolean {
    if (this.#inWrite !== outgoing) return false;
    this.#inWrite = undefined;
    if (this.#closed) this.#stopWatchingForStall();
    // Gone with the call, it may never have reached the client; its step ran all the same,
    // and its sequence goes on (unless only this answer named it).
    this.#budget.give(outgoing.bytes);
    if (!delivered) this.#dropped(outgoing);
    if (this.#closed && this.#releasePending) {
      this.#releasePending = false;
      this.#budget.release();
    }
    return true;
  }

  #watchForStall(): void {
    if (this.#stallTimeoutMs === undefined) return;
    this.#writeStartedAt = performance.now();
    if (this.#stallTimer !== undefined) return;
    const check = (): void => {
      this.#stallTimer = undefined;
      if (this.#inWrite === undefined) return;
      const left = this.#writeStartedAt + this.#stallTimeoutMs! - performance.now();
      if (left > 0) {
        this.#stallTimer = setTimeout(check, timerDelay(left)).unref();
        return;
      }
      this.#stalled();
    };
    this.#stallTimer = setTimeout(check, timerDelay(this.#stallTimeoutMs!)).unref();
  }

  /**
   * An ended stream's watch goes with it: an armed timer holds the call and what it
   * references until it fires, the stall timeout (10 minutes) after the last write, and
   * a client that opened streams at a steady rate made the server hold hundreds of MB.
   */
  #stopWatchingForStall(): void {
    if (this.#stallTimer === undefined) return;
    clearTimeout(this.#stallTimer);
    this.#stallTimer = undefined;
  }

  /**
   * The client has taken nothing for the stall timeout: the stream is reset, which frees
   * the answers HTTP/2 holds; the write under way is settled as the stream is abandoned.
   */
  #stalled(): void {
    const details = `the client has read none of its responses for ${this.#stallTimeoutMs! / 1000} s (--grpc-stream-stall-timeout-secs)`;
    this.#logger.warn({ event: "stream_stalled" }, details);
    this.#refusals?.refused("grpc_stream_stall_timeout");
    this.#abandon("the client stopped reading its responses");
    if (!resetCall(this.#call)) this.#call.emit("error", statusOf(unavailable(details)));
  }

  /** A request of `bytes` is answered (a decoupled one: its last response was sent). */
  #answered(bytes: number): void {
    this.#inflight--;
    this.#heldRequestBytes -= bytes;
    if (this.#closed) return;
    this.#updateFlow();
    this.#maybeFinish();
  }

  #updateFlow(): void {
    if (this.#closed) return;
    const hold =
      this.#budget.saturated ||
      this.#outbox.length >= WRITE_HIGH_WATER ||
      this.#heldRequestBytes - this.#slotWaits.bytes - this.#awaitingTurnBytes >= this.#maxHeldRequestBytes ||
      this.#inflight - this.#slotWaits.requests - this.#awaitingTurn >= this.#maxInflight;
    if (hold && !this.#paused) {
      this.#paused = true;
      this.#call.pause();
    } else if (!hold && this.#paused) {
      this.#paused = false;
      this.#call.resume();
    }
  }

  /** The client has sent its last request and every answer is written: end with OK. */
  #maybeFinish(): void {
    if (
      this.#closed ||
      !this.#readEnded ||
      this.#inflight > 0 ||
      this.#inWrite !== undefined ||
      this.#outbox.length > 0
    )
      return;
    this.#close();
    this.#call.end();
  }

  /**
   * The client left more answers unread than the connection's budget: the answers waiting
   * here are dropped (their steps ran: their sequences go on, as when the client leaves),
   * requests in flight are cancelled, and the call ends with RESOURCE_EXHAUSTED.
   */
  #overflow(): void {
    const details = `the client is not reading its responses: ${this.#budget.refusal}`;
    this.#logger.warn({ event: "stream_overflow" }, details);
    this.#abandon("the client did not read its responses");
    this.#call.emit("error", statusOf(new ServerError("RESOURCE_EXHAUSTED", details)));
  }

  /**
   * A request the model had taken failed on a stream opened with `triton_grpc_error: true`:
   * the answers before it have been written, and the call ends with its status, as
   * Triton's, the stream's other requests as on any end of the stream.
   */
  #endWithError(status: GrpcErrorStatus): void {
    this.#logger.debug(
      { code: status.code },
      "ModelStreamInfer stream ended by a request's error (triton_grpc_error)",
    );
    this.#abandon("the stream ended with a request's error");
    this.#call.emit("error", status);
  }

  #close(): void {
    this.#closed = true;
    // The stall watch stays while an answer is with grpc-js: a client that never reads
    // again holds it there until the stream is reset.
    if (this.#inWrite === undefined) this.#stopWatchingForStall();
    this.#stopWatchingBudget();
    // Answers never written are given back (their steps ran: their sequences go on, but for
    // a START's whose id only its answer named); the one with grpc-js when it is done with.
    for (const outgoing of this.#outbox.drain()) {
      this.#budget.give(outgoing.bytes);
      this.#dropped(outgoing);
    }
    if (this.#inWrite !== undefined) this.#releasePending = true;
    else this.#budget.release();
  }

  /** The stream is gone: abort whatever is still in flight (already answered requests are unaffected). */
  #abandon(why: string): void {
    if (!this.#closed) this.#close();
    // The call has ended: an answer still with grpc-js will not be called back for.
    if (this.#inWrite !== undefined) this.#writeDone(this.#inWrite, false);
    if (this.#inflight === 0) return;
    // Decoupled requests waiting to write see the stream closed and stop (their model is told).
    this.#releaseDrain?.();
    if (this.#inflight > 0) this.#controller.abort(cancelled(`request cancelled: ${why}`));
  }
}
