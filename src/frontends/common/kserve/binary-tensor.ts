import { elementByteSize } from "../../../core/datatype.ts";
import { invalidArg } from "../../../core/errors.ts";
import type { ModelConfig } from "../../../core/model-config.ts";
import { requestLabel } from "../../../core/request-label.ts";
import { shapeInMessage, type Tensor } from "../../../core/tensor.ts";
import { decodeRawTensor } from "../raw-tensor.ts";

// Triton's binary tensor data extension over HTTP: the body is the JSON header
// (`Inference-Header-Content-Length` bytes) followed by the raw bytes of the inputs that
// carry `parameters.binary_data_size`, in input order; responses are framed the same
// way. With a header length of 0 the whole body is the raw bytes of the model's only
// input, whose shape is deduced from the model's configuration.

/** As node presents request headers (lower case). */
export const HEADER_LENGTH = "inference-header-content-length";
/** As written on responses: some clients match the header's name case-sensitively. */
export const HEADER_LENGTH_NAME = "Inference-Header-Content-Length";

/** The JSON header's length from the request header; undefined when the header is absent. */
export function readHeaderLength(
  value: string | string[] | undefined,
  bodyLength: number,
): number | undefined {
  if (value === undefined) return undefined;
  const text = Array.isArray(value) ? value.join(",") : value;
  if (!/^\s*\d+\s*$/.test(text))
    throw invalidArg(`Unable to parse Inference-Header-Content-Length, got: ${text}`);
  const length = Number(text);
  if (length > bodyLength) {
    throw invalidArg(
      `inference header size should be in range (0, ${bodyLength}), got: ${text} (the request body has ${bodyLength} bytes)`,
    );
  }
  return length;
}

/** The binary part of a request body, handed out input by input. */
export class BinaryInputs {
  readonly #body: Uint8Array;
  readonly #model: string;
  #offset: number;

  constructor(body: Uint8Array, start: number, model: string) {
    this.#body = body;
    this.#offset = start;
    this.#model = model;
  }

  /** The next `size` bytes, for input `input`. */
  take(input: string, size: number): Uint8Array {
    const remaining = this.#body.byteLength - this.#offset;
    if (size > remaining) {
      throw invalidArg(
        `unexpected size for input '${input}', expecting ${size - remaining} additional bytes for model '${this.#model}'`,
      );
    }
    const bytes = this.#body.subarray(this.#offset, this.#offset + size);
    this.#offset += size;
    return bytes;
  }

  /** Checks that every byte was claimed by some input. */
  finish(): void {
    const extra = this.#body.byteLength - this.#offset;
    if (extra !== 0) {
      throw invalidArg(
        `unexpected additional input data for model '${this.#model}': ${extra} bytes follow the last binary input`,
      );
    }
  }
}

/**
 * The tensor of a raw-body request (header length 0), following Triton's rule: the model
 * must have exactly one input; a batching model gets batch size 1; at most one variable
 * dimension, deduced from the byte size; a BYTES input must have shape [1] and the body
 * is that one element. Refusals in Triton's words, which open with the request's id (a
 * raw request has none).
 */
export function rawInputTensor(config: ModelConfig, body: Uint8Array): { name: string; tensor: Tensor } {
  const input = config.inputs[0];
  if (input === undefined || config.inputs.length !== 1) {
    throw invalidArg(
      `${requestLabel("")}Raw request must only have 1 input (found 1) to be deduced but got ${config.inputs.length} inputs in '${config.name}' model configuration`,
    );
  }
  const shape: number[] = config.maxBatchSize > 0 && !input.shared ? [1] : [];
  let variable = -1;
  let fixed = 1;
  for (const dim of input.dims) {
    if (dim === -1) {
      if (variable !== -1) {
        throw invalidArg(
          `${requestLabel("")}The shape of the raw input '${input.name}' can not be deduced because there are more than one variable-sized dimension`,
        );
      }
      variable = shape.length;
    } else {
      fixed *= dim;
    }
    shape.push(dim);
  }
  if (input.datatype === "BYTES") {
    if (variable !== -1 || fixed !== 1) {
      throw invalidArg(
        `${requestLabel("")}For BYTE datatype raw input '${input.name}', the model must have input shape [1]`,
      );
    }
    return { name: input.name, tensor: { datatype: "BYTES", shape, data: [body] } };
  }
  if (variable !== -1) {
    const rowBytes = fixed * (elementByteSize(input.datatype) as number);
    if (rowBytes === 0) {
      throw invalidArg(
        `unexpected total byte size ${body.byteLength} for raw input '${input.name}': its shape ${shapeInMessage(shape)} holds no elements`,
      );
    }
    // As Triton deduces it: the whole rows the body holds; bytes past them fail the size check.
    shape[variable] = Math.floor(body.byteLength / rowBytes);
  }
  const request = { config, requestId: "" };
  return { name: input.name, tensor: decodeRawTensor(input.name, input.datatype, shape, body, request) };
}

/**
 * A response body: the JSON header followed by each binary output's bytes. `reserve` bytes
 * are left free at the start for a transport's own framing (a WebSocket message's length
 * prefix), so the body is written once.
 */
export function binaryBody(
  header: string,
  parts: readonly Uint8Array[],
  reserve = 0,
): { body: Buffer; headerLength: number } {
  const headerLength = Buffer.byteLength(header);
  let total = reserve + headerLength;
  for (const part of parts) total += part.byteLength;
  const body = Buffer.allocUnsafe(total);
  body.write(header, reserve, "utf8");
  let offset = reserve + headerLength;
  for (const part of parts) {
    body.set(part, offset);
    offset += part.byteLength;
  }
  return { body, headerLength };
}
