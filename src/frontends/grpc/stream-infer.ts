import { setMaxListeners } from "node:events";
import type { ServerDuplexStream } from "@grpc/grpc-js";
import { asServerError, cancelled } from "../../core/errors.ts";
import type { InferRequest, InferResponse } from "../../core/infer.ts";
import type { ModelRegistry, ServedModel } from "../../core/model.ts";
import { inferStream } from "../../core/response-stream.ts";
import { OrderedRelease } from "../../core/scheduler/ordered-release.ts";
import type { Logger } from "../../observability/logger.ts";
import { relayResponses } from "../common/kserve/decoupled-responses.ts";
import { decodeInferRequest } from "./infer-request-decoder.ts";
import { encodeInferResponse, streamError } from "./infer-response-encoder.ts";
import type { ModelInferRequestMessage, ModelStreamInferResponseMessage } from "./messages.ts";
import { encodeStreamInferResponse } from "./proto-definitions.ts";

// One ModelStreamInfer call. Requests start as they arrive, so many requests (of many
// sequences) are in flight on one stream, and their answers are written in the order the
// requests came, as Triton writes a stream's responses: clients match answers to requests
// by position, and a request of one sequence that finishes early (another sequence's
// request waits for a slot) waits for the answers before it. A failed request is answered
// in-band (error_message + its id), in its turn, and the stream stays open.
//
// A decoupled model's request is answered by each of its responses as they come (its
// model decides their order and number); it counts as in flight until its last.
//
// Back-pressure: reading stops while `maxInflight` requests are unanswered, or while the
// client is not reading its responses (write() returned false), and resumes when both
// clear. Unread requests then wait in HTTP/2 flow control, so a stream never makes the
// server buffer without bound.
//
// Cancellation: when the call is cancelled or the connection breaks, every request still
// in flight has its signal aborted; the core fails those not yet run with CANCELLED. The
// requests of a stream share one signal: a request already answered no longer listens
// to it (the core removes its listener when the request settles), and one AbortController
// per message would be a measurable part of the per-message cost.

// Responses: errors go out as messages; successful answers already encoded (see #succeed).
export type StreamInferCall = ServerDuplexStream<
  ModelInferRequestMessage,
  ModelStreamInferResponseMessage | Uint8Array
>;

export class StreamInferSession {
  readonly #call: StreamInferCall;
  readonly #registry: ModelRegistry;
  readonly #logger: Logger;
  readonly #maxInflight: number;
  readonly #maxMessageBytes: number;
  /** Aborts the requests in flight when the stream goes away. */
  readonly #controller = new AbortController();
  /** Answers leave in request order. */
  readonly #order = new OrderedRelease();
  /** Requests accepted and not yet answered. */
  #inflight = 0;
  #writeBlocked = false;
  /** Decoupled requests waiting for the client to read before their next response. */
  #drainWaiters: Promise<void> | undefined;
  #releaseDrain: (() => void) | undefined;
  #paused = false;
  #readEnded = false;
  #closed = false;

  constructor(
    call: StreamInferCall,
    registry: ModelRegistry,
    logger: Logger,
    maxInflight: number,
    maxMessageBytes: number,
  ) {
    this.#call = call;
    this.#registry = registry;
    this.#logger = logger;
    this.#maxInflight = Math.max(1, maxInflight);
    this.#maxMessageBytes = maxMessageBytes;
    // One listener per request in flight, so up to maxInflight: not a leak.
    setMaxListeners(0, this.#controller.signal);
    call.on("data", (message: ModelInferRequestMessage) => this.#accept(message));
    call.on("end", () => {
      this.#readEnded = true;
      this.#maybeFinish();
    });
    call.on("drain", () => {
      this.#writeBlocked = false;
      const release = this.#releaseDrain;
      this.#drainWaiters = undefined;
      this.#releaseDrain = undefined;
      release?.();
      this.#updateFlow();
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
    this.#inflight++;
    this.#updateFlow();
    const turn = this.#order.issue();
    let pending: Promise<InferResponse>;
    try {
      const decoded = decodeInferRequest(message, this.#controller.signal);
      const model = this.#registry.model(decoded.modelName, decoded.modelVersion);
      if (model.decoupled === true) {
        // Its responses go out as they come: it holds no place in the order.
        this.#order.complete(turn, () => {});
        this.#relay(model, decoded.request, message.id);
        return;
      }
      pending = model.infer(decoded.request);
    } catch (error) {
      this.#inTurn(turn, () => this.#fail(error, message.id));
      return;
    }
    pending.then(
      (response) => this.#inTurn(turn, () => this.#succeed(response, message.id)),
      (error: unknown) => this.#inTurn(turn, () => this.#fail(error, message.id)),
    );
  }

  /** Answers once every earlier request has been answered. */
  #inTurn(turn: number, write: () => void): void {
    this.#order.complete(turn, write);
  }

  /**
   * A decoupled model's request: each response is written as it comes (Triton's
   * `triton_final_response` on each); the next waits while the client is not reading.
   */
  #relay(model: ServedModel, request: InferRequest, requestId: string | undefined): void {
    const stream = inferStream(model, request);
    relayResponses(model, stream, request, (response) => {
      if (this.#closed) {
        stream.cancel();
        return undefined;
      }
      const encoded = this.#encode(response, requestId);
      if (!this.#call.write(encoded)) this.#writeBlocked = true;
      this.#updateFlow();
      return this.#writeBlocked ? this.#drained() : undefined;
    }).then(
      () => this.#answered(),
      (error: unknown) => this.#fail(error, requestId),
    );
  }

  /** Resolves once the client has read what was written (grpc-js 'drain'). */
  #drained(): Promise<void> {
    this.#drainWaiters ??= new Promise<void>((resolve) => {
      this.#releaseDrain = resolve;
    });
    return this.#drainWaiters;
  }

  #succeed(response: InferResponse, requestId: string | undefined): void {
    // Encoded here rather than by grpc-js on write: a message over the send limit (or one
    // that fails to encode) makes grpc-js end the whole call, which would fail every other
    // request in flight on the stream and cancel their sequences' queued work. Seen here,
    // it is refused in-band like any other error and the stream goes on.
    this.#answer(this.#encode(response, requestId));
  }

  /** The response as it goes out, or an in-band error when it cannot. */
  #encode(
    response: InferResponse,
    requestId: string | undefined,
  ): ModelStreamInferResponseMessage | Uint8Array {
    let encoded: Buffer;
    try {
      encoded = encodeStreamInferResponse({ infer_response: encodeInferResponse(response) });
    } catch (error) {
      return streamError(asServerError(error).message, requestId);
    }
    // A negative limit is grpc-js's "unlimited".
    if (this.#maxMessageBytes >= 0 && encoded.byteLength > this.#maxMessageBytes) {
      return streamError(
        `the response is larger than the server's maximum gRPC message size (${encoded.byteLength} vs. ${this.#maxMessageBytes} bytes)`,
        requestId,
      );
    }
    return encoded;
  }

  #fail(error: unknown, requestId: string | undefined): void {
    const serverError = asServerError(error);
    if (serverError.code === "INTERNAL" || serverError.code === "UNKNOWN") {
      this.#logger.error({ err: error, requestId }, "ModelStreamInfer request failed");
    }
    this.#answer(streamError(serverError.message, requestId));
  }

  #answer(message: ModelStreamInferResponseMessage | Uint8Array): void {
    if (!this.#closed && !this.#call.write(message)) this.#writeBlocked = true;
    this.#answered();
  }

  /** A request is answered (a decoupled one: its last response was written). */
  #answered(): void {
    this.#inflight--;
    if (this.#closed) return;
    this.#updateFlow();
    this.#maybeFinish();
  }

  #updateFlow(): void {
    if (this.#closed) return;
    const hold = this.#writeBlocked || this.#inflight >= this.#maxInflight;
    if (hold && !this.#paused) {
      this.#paused = true;
      this.#call.pause();
    } else if (!hold && this.#paused) {
      this.#paused = false;
      this.#call.resume();
    }
  }

  /** The client has sent its last request and every request is answered: end with OK. */
  #maybeFinish(): void {
    if (this.#closed || !this.#readEnded || this.#inflight > 0) return;
    this.#closed = true;
    this.#call.end();
  }

  /** The stream is gone: abort whatever is still in flight (already answered requests are unaffected). */
  #abandon(why: string): void {
    if (this.#closed && this.#inflight === 0) return;
    this.#closed = true;
    // Decoupled requests waiting to write see the stream closed and stop (their model is told).
    this.#releaseDrain?.();
    if (this.#inflight > 0) this.#controller.abort(cancelled(`request cancelled: ${why}`));
  }
}
