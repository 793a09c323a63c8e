import type { ClientDuplexStream, Metadata, StatusObject } from "@grpc/grpc-js";
import type {
  InferParameterMessage,
  ModelInferRequestMessage,
  ModelStreamInferResponseMessage,
  ParameterMap,
} from "../../src/frontends/grpc/messages.ts";
import type { TestClient } from "../grpc/support/grpc-harness.ts";

// Helpers for end-to-end tests over the real server's gRPC endpoint, on top of the grpc-js
// TestClient built from seqserve's proto: one ModelStreamInfer call whose responses are
// matched to their requests by request id, and builders for sequence requests.

type Stream = ClientDuplexStream<ModelInferRequestMessage, ModelStreamInferResponseMessage>;

interface Waiter {
  readonly resolve: (response: ModelStreamInferResponseMessage) => void;
  readonly reject: (error: Error) => void;
}

/** A ModelStreamInfer call: `send` resolves with the response (or in-band error) to that request. */
export class StreamCall {
  readonly #stream: Stream;
  readonly #prefix: string;
  readonly #waiting = new Map<string, Waiter>();
  #next = 0;
  #failure: Error | undefined;
  /** How the call ended (its gRPC status), once it has. */
  readonly status: Promise<StatusObject>;

  constructor(client: TestClient, prefix = "r", metadata?: Metadata) {
    this.#stream = client.stream(metadata);
    this.#prefix = prefix;
    this.#stream.on("data", (response: ModelStreamInferResponseMessage) => {
      const id = response.infer_response?.id ?? "";
      const waiter = this.#waiting.get(id);
      if (waiter === undefined) {
        this.#fail(new Error(`a response to unknown request '${id}': ${JSON.stringify(response)}`));
        return;
      }
      this.#waiting.delete(id);
      waiter.resolve(response);
    });
    // A cancelled or failed call ends with a status; the error event repeats it.
    this.#stream.on("error", () => {});
    this.status = new Promise((resolve) => {
      this.#stream.once("status", (status: StatusObject) => {
        // Requests still waiting will never be answered; later sends fail at once.
        this.#fail(new Error(`the stream ended (${status.code} ${status.details})`));
        resolve(status);
      });
    });
  }

  /** Sends one request (an id is added when it has none) and resolves with its answer. */
  send(request: ModelInferRequestMessage): Promise<ModelStreamInferResponseMessage> {
    if (this.#failure !== undefined) return Promise.reject(this.#failure);
    const id = request.id ?? `${this.#prefix}${this.#next++}`;
    if (this.#waiting.has(id)) throw new Error(`request id '${id}' is already waiting`);
    const answer = new Promise<ModelStreamInferResponseMessage>((resolve, reject) => {
      this.#waiting.set(id, { resolve, reject });
    });
    this.#stream.write({ ...request, id });
    return answer;
  }

  #fail(error: Error): void {
    this.#failure ??= error;
    for (const waiter of this.#waiting.values()) waiter.reject(error);
    this.#waiting.clear();
  }

  /** Half-closes the call and resolves with its status. */
  end(): Promise<StatusObject> {
    this.#stream.end();
    return this.status;
  }

  /** Cancels the call (as a client that goes away does); resolves with its status. */
  cancel(): Promise<StatusObject> {
    this.#stream.cancel();
    return this.status;
  }
}

export interface SequenceFlags {
  readonly id: bigint | number | string;
  readonly start?: boolean;
  readonly end?: boolean;
}

/** The sequence parameters as Triton clients send them: int64_param (or string_param) ids, bool flags. */
export function sequenceParameters(sequence: SequenceFlags): Record<string, InferParameterMessage> {
  const parameters: Record<string, InferParameterMessage> = {
    sequence_id:
      typeof sequence.id === "string"
        ? { string_param: sequence.id }
        : { int64_param: BigInt.asIntN(64, BigInt(sequence.id)).toString() },
  };
  if (sequence.start) parameters.sequence_start = { bool_param: true };
  if (sequence.end) parameters.sequence_end = { bool_param: true };
  return parameters;
}

/** Raw little-endian bytes of a typed array (a view, not a copy). */
export const rawBytes = (data: ArrayBufferView): Buffer =>
  Buffer.from(data.buffer, data.byteOffset, data.byteLength);

/** A request to an accumulator-style model: INT32 INPUT [1, 1] = `value`, sent raw. */
export function accumulatorRequest(
  model: string,
  value: number,
  sequence: SequenceFlags,
  extra: { readonly parameters?: ParameterMap } = {},
): ModelInferRequestMessage {
  return {
    model_name: model,
    parameters: { ...sequenceParameters(sequence), ...extra.parameters },
    inputs: [{ name: "INPUT", datatype: "INT32", shape: [1, 1] }],
    raw_input_contents: [rawBytes(new Int32Array([value]))],
  };
}

/** The in-band error of a stream response ("" when it succeeded). */
export const errorOf = (response: ModelStreamInferResponseMessage): string => response.error_message ?? "";

/** The raw bytes of output `name`; fails with the in-band error when the request failed. */
export function rawOutput(response: ModelStreamInferResponseMessage, name: string): Buffer {
  const error = errorOf(response);
  if (error !== "") throw new Error(`the request failed in-band: ${error}`);
  const infer = response.infer_response;
  const index = infer?.outputs?.findIndex((o) => o.name === name) ?? -1;
  const raw = infer?.raw_output_contents?.[index];
  if (index < 0 || raw === undefined) throw new Error(`no output '${name}' in ${JSON.stringify(infer)}`);
  return Buffer.from(raw.buffer, raw.byteOffset, raw.byteLength);
}

/** The single INT32 value of output `name` (the accumulator's OUTPUT). */
export const int32Output = (response: ModelStreamInferResponseMessage, name = "OUTPUT"): number =>
  rawOutput(response, name).readInt32LE(0);

/** Triton's message for a request of a sequence the server does not know (or no longer knows). */
export const startFlagError = (id: bigint | number | string, model: string): string =>
  `inference request for sequence ${id} to model '${model}' must specify the START flag on the first request of the sequence`;
