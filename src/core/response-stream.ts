import type { ServerError } from "./errors.ts";
import type { PartialResponse, ResponseSink } from "./executor.ts";
import type { InferRequest, InferResponse, Parameters } from "./infer.ts";
import type { ServedModel } from "./model.ts";
import { Deque } from "./scheduler/request-queue.ts";

// Several responses to one request (Triton's decoupled models), protocol-free. The model
// side pushes responses as they are produced; a frontend iterates them and writes each to
// its client. The consumer sets the pace: each response it takes is reported back to the
// producer (`onConsumed`), which sends more only while few enough are untaken, so a client
// that reads slowly slows its own request's producer and holds a bounded amount here.
// Leaving the iteration early (a client gone) cancels the request, and the model is told.

export interface StreamedInferResponse extends InferResponse {
  /** The model marked this response as the request's last. */
  readonly final: boolean;
}

export interface InferResponseStream extends AsyncIterable<StreamedInferResponse> {
  /** Stops the request: the model is told, and the iteration ends. */
  cancel(): void;
  /**
   * What the server adds to the request's responses (a server-assigned `sequence_id`),
   * for a client told of the request's end without a response from the model.
   */
  readonly parameters: Parameters;
  /**
   * Whether the request has been handed to a model instance. A failure from then on is
   * the model's, after its inference began (a protocol may answer it as a response); one
   * before was a refusal (a check, a full queue, a sequence's admission).
   */
  readonly dispatched: boolean;
  /**
   * `listener(change)` runs as responses wait here to be taken: +bytes as one arrives,
   * −bytes as it is taken or dropped, so that a frontend can count what its connection's
   * requests hold before it reads them. Runs at once with what already waits.
   */
  onWaiting?(listener: (change: number) => void): void;
}

interface Queued {
  readonly response: StreamedInferResponse;
  readonly bytes: number;
}

export class ResponseChannel implements ResponseSink, InferResponseStream {
  readonly #toResponse: ((partial: PartialResponse) => StreamedInferResponse) | undefined;
  readonly #onCancel: () => void;
  readonly #queue = new Deque<Queued>();
  readonly #consumed: ((bytes: number) => void)[] = [];
  #wake: (() => void) | undefined;
  #waiting: ((change: number) => void) | undefined;
  #waitingBytes = 0;
  #done = false;
  #error: ServerError | undefined;
  #iterating = false;
  #request: { readonly dispatched: boolean } | undefined;
  parameters: Parameters = {};

  /** `toResponse` completes a model's partial response (model name, version, request id). */
  constructor(onCancel: () => void, toResponse?: (partial: PartialResponse) => StreamedInferResponse) {
    this.#toResponse = toResponse;
    this.#onCancel = onCancel;
  }

  // ---- producer side ----

  /** The request on its way through its scheduler, whose dispatch this stream tells. */
  follow(request: { readonly dispatched: boolean }): void {
    this.#request = request;
  }

  get dispatched(): boolean {
    return this.#request?.dispatched === true;
  }

  push(partial: PartialResponse, bytes: number): void {
    if (this.#toResponse === undefined) throw new Error("this channel takes complete responses");
    this.deliver(this.#toResponse(partial), bytes);
  }

  deliver(response: StreamedInferResponse, bytes: number): void {
    if (this.#done) {
      // Dropped (the client left, and the request goes on: see cancel()), it counts as taken.
      this.#taken(bytes);
      return;
    }
    this.#queue.push({ response, bytes });
    this.#changeWaiting(bytes);
    this.#signal();
  }

  onWaiting(listener: (change: number) => void): void {
    this.#waiting = listener;
    if (this.#waitingBytes > 0) listener(this.#waitingBytes);
  }

  #changeWaiting(change: number): void {
    if (change === 0) return;
    this.#waitingBytes += change;
    this.#waiting?.(change);
  }

  onConsumed(listener: (bytes: number) => void): void {
    this.#consumed.push(listener);
  }

  /** No more responses: the iteration ends after the queued ones. */
  finish(): void {
    this.#done = true;
    this.#signal();
  }

  /** The request failed: the iteration throws `error` after the queued responses. */
  fail(error: ServerError): void {
    if (this.#done) return;
    this.#error = error;
    this.#done = true;
    this.#signal();
  }

  // ---- consumer side ----

  /**
   * The client leaves. The producer is told (`onCancel`), and what it still sends is
   * dropped and counted as taken, so that a request that goes on all the same (one whose
   * sequence a cancel does not end runs to its end) is never held back waiting for a
   * client that is gone.
   */
  cancel(): void {
    const wasDone = this.#done;
    this.#done = true;
    for (const queued of this.#queue.drain()) this.#taken(queued.bytes);
    this.#changeWaiting(-this.#waitingBytes);
    this.#signal();
    if (!wasDone || this.#error === undefined) this.#onCancel();
  }

  [Symbol.asyncIterator](): AsyncIterator<StreamedInferResponse> {
    if (this.#iterating) throw new Error("a response stream can be iterated once");
    this.#iterating = true;
    return {
      next: () => this.#next(),
      return: () => {
        if (!this.#done || this.#queue.length > 0) this.cancel();
        return Promise.resolve({ done: true, value: undefined });
      },
    };
  }

  async #next(): Promise<IteratorResult<StreamedInferResponse>> {
    for (;;) {
      const queued = this.#queue.shift();
      if (queued !== undefined) {
        this.#changeWaiting(-queued.bytes);
        this.#taken(queued.bytes);
        return { done: false, value: queued.response };
      }
      if (this.#error !== undefined) {
        const error = this.#error;
        this.#error = undefined;
        throw error;
      }
      if (this.#done) return { done: true, value: undefined };
      await new Promise<void>((resolve) => {
        this.#wake = resolve;
      });
    }
  }

  #taken(bytes: number): void {
    for (const listener of this.#consumed) listener(bytes);
  }

  #signal(): void {
    const wake = this.#wake;
    this.#wake = undefined;
    wake?.();
  }
}

/**
 * One response as a stream: how a model that answers once is streamed. `channel`: the
 * stream to carry it, when it follows its request (ResponseChannel.follow).
 */
export function singleResponseStream(
  response: Promise<InferResponse>,
  channel = new ResponseChannel(() => {}),
): InferResponseStream {
  response.then(
    (value) => {
      channel.parameters = value.parameters;
      channel.deliver({ ...value, final: true }, 0);
      channel.finish();
    },
    (error: ServerError) => channel.fail(error),
  );
  return channel;
}

/** A request's responses: as many as a decoupled model sends, else its one answer. */
export function inferStream(model: ServedModel, request: InferRequest): InferResponseStream {
  if (model.stream !== undefined) return model.stream(request);
  let response: Promise<InferResponse>;
  try {
    response = model.infer(request);
  } catch (error) {
    response = Promise.reject(error);
  }
  return singleResponseStream(response);
}
