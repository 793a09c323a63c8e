import { type DataType, elementByteSize, viewArray } from "../../core/datatype.ts";
import { invalidArg } from "../../core/errors.ts";
import type { ModelConfig } from "../../core/model-config.ts";
import { requestLabel } from "../../core/request-label.ts";
import { checkInputDescription } from "../../core/request-validation.ts";
import { type BytesElements, type NumericTensor, shapeInMessage, type Tensor } from "../../core/tensor.ts";
import { checkedElementCount } from "../../core/tensor-size.ts";

// The raw tensor layout shared by the HTTP binary extension and gRPC
// `raw_input_contents` / `raw_output_contents`: little-endian, row-major; a BYTES tensor is
// each element as a 4-byte little-endian length followed by its bytes.

/**
 * The request a raw tensor belongs to, where its size is checked as Triton checks it (the
 * KServe APIs): a mismatch is told in Triton's words, naming the model and the request,
 * after the checks Triton makes first (the input's name, batch size, datatype and shape).
 */
export interface RawTensorRequest {
  readonly config: ModelConfig;
  readonly requestId: string;
}

/**
 * Reads a raw tensor. Numeric data is a view over `bytes` (no copy unless misaligned), so
 * the tensor lives as long as the buffer it came from.
 */
export function decodeRawTensor(
  name: string,
  datatype: DataType,
  shape: readonly number[],
  bytes: Uint8Array,
  request?: RawTensorRequest,
): Tensor {
  // A shape the bytes cannot fill is refused before anything is allocated for it.
  const count = checkRawByteLength(name, datatype, shape, bytes.byteLength, request);
  if (datatype === "BYTES") {
    return { datatype, shape, data: decodeBytesElements(name, shape, count, bytes, request) };
  }
  return { datatype, shape, data: viewArray(datatype, bytes.buffer, bytes.byteOffset, bytes.byteLength) };
}

/**
 * The element count of input `name`, refused (INVALID_ARG) when `byteLength` raw bytes
 * cannot be its data: any length may hold BYTES elements, other types need exactly the
 * shape's bytes.
 */
export function checkRawByteLength(
  name: string,
  datatype: DataType,
  shape: readonly number[],
  byteLength: number,
  request?: RawTensorRequest,
): number {
  const count = checkedElementCount(name, datatype, shape);
  if (datatype === "BYTES") return count;
  const expected = count * (elementByteSize(datatype) as number);
  if (byteLength !== expected) {
    if (request === undefined) {
      throw invalidArg(
        `unexpected total byte size ${byteLength} for input '${name}', expecting ${expected} for shape ${shapeInMessage(shape)} of ${datatype}`,
      );
    }
    // Only now, on the way to a refusal: what Triton refuses before the byte size is told first.
    checkInputDescription(request.config, request.requestId, name, { datatype, shape });
    throw invalidArg(
      `${requestLabel(request.requestId)}input byte size mismatch for input '${name}' for model '${request.config.name}'. Expected ${expected}, got ${byteLength}`,
    );
  }
  return count;
}

const LENGTH_BYTES = 4;

/**
 * Triton's words (ValidateBytesInputs) for BYTES data that does not hold `count` elements:
 * `remaining` bytes left where an element's length should start (fewer than 4: a cut
 * length; none: too few elements), or elements past `count`.
 */
function bytesElementsRefusal(
  request: RawTensorRequest,
  name: string,
  shape: readonly number[],
  count: number,
  found: number,
  remaining: number,
): never {
  // What Triton refuses before it reads the elements is told first.
  checkInputDescription(request.config, request.requestId, name, { datatype: "BYTES", shape });
  const label = requestLabel(request.requestId);
  const where = `inference input '${name}' for model '${request.config.name}'`;
  if (remaining > 0 && remaining < LENGTH_BYTES) {
    throw invalidArg(
      `${label}incomplete string length indicator for ${where}, expecting ${LENGTH_BYTES} bytes but only ${remaining} bytes available. Please make sure the string length indicator is in one buffer.`,
    );
  }
  if (found > count) {
    throw invalidArg(
      `${label}unexpected number of string elements ${found} for ${where}, expecting ${count}`,
    );
  }
  throw invalidArg(`${label}expected ${count} string elements for ${where}, got ${found}`);
}

function decodeBytesElements(
  name: string,
  shape: readonly number[],
  count: number,
  bytes: Uint8Array,
  request: RawTensorRequest | undefined,
): BytesElements {
  // Grown as elements are found: the count is only a claim until the bytes bear it out.
  const elements: Uint8Array[] = [];
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  let offset = 0;
  for (let i = 0; i < count; i++) {
    if (offset + LENGTH_BYTES > bytes.byteLength) {
      if (request !== undefined)
        bytesElementsRefusal(request, name, shape, count, i, bytes.byteLength - offset);
      throw invalidArg(
        `unexpected end of BYTES data for input '${name}': expected ${count} elements, found ${i}`,
      );
    }
    const length = view.getUint32(offset, true);
    offset += 4;
    if (offset + length > bytes.byteLength) {
      // Triton counts the element and takes what is left as its bytes: too few elements if
      // more were due. Where it was the last one, Triton lets it through to the backend;
      // here it is refused, in seqserve's words, after Triton's earlier checks.
      if (request !== undefined) {
        if (i + 1 < count) bytesElementsRefusal(request, name, shape, count, i + 1, 0);
        checkInputDescription(request.config, request.requestId, name, { datatype: "BYTES", shape });
      }
      throw invalidArg(
        `${request === undefined ? "" : requestLabel(request.requestId)}BYTES element ${i} of input '${name}' claims ${length} bytes, past the end of its data`,
      );
    }
    elements.push(bytes.subarray(offset, offset + length));
    offset += length;
  }
  if (offset !== bytes.byteLength) {
    if (request !== undefined)
      bytesElementsRefusal(request, name, shape, count, count + 1, bytes.byteLength - offset);
    throw invalidArg(
      `unexpected total byte size ${bytes.byteLength} for input '${name}', its ${count} BYTES elements use ${offset}`,
    );
  }
  return elements;
}

/** The raw bytes of a tensor: a view of numeric data (no copy), or the length-prefixed BYTES layout. */
export function encodeRawTensor(tensor: Tensor): Uint8Array {
  if (tensor.datatype !== "BYTES") {
    const data = (tensor as NumericTensor).data;
    return new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
  }
  const elements = tensor.data as BytesElements;
  let total = 0;
  for (const element of elements) total += 4 + element.byteLength;
  const out = new Uint8Array(total);
  const view = new DataView(out.buffer);
  let offset = 0;
  for (const element of elements) {
    view.setUint32(offset, element.byteLength, true);
    out.set(element, offset + 4);
    offset += 4 + element.byteLength;
  }
  return out;
}
