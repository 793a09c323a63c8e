import { type DataType, elementByteSize } from "./datatype.ts";
import { invalidArg } from "./errors.ts";
import { shapeInMessage } from "./tensor.ts";

// The one size check every frontend makes on a tensor a client describes, before anything
// is allocated for it: a shape is only a claim, and [1, 2^31] FP32 would reserve 8 GiB for
// a request of a few bytes. A tensor may not have more elements than a typed array holds,
// nor more bytes than the request that carries it may have; a BYTES tensor may not have
// more elements than MAX_BYTES_ELEMENTS.

/** The most elements one tensor may have (V8's typed arrays hold at most 2^32 - 1). */
const MAX_TENSOR_ELEMENTS = 2 ** 32 - 1;

/**
 * The most elements one BYTES tensor may have. Each element is held as an object of its
 * own (a view of its bytes, about 100 bytes of heap, more while a JSON request is read),
 * however short: a request of empty strings would otherwise make the server hold 25 times
 * its size or more (a 64 MiB body of them, 6 GB). At this bound a tensor holds some tens
 * of megabytes in all, on a par with a body at the default limit.
 */
export const MAX_BYTES_ELEMENTS = 2 ** 18;

/**
 * The element count of `shape`, refused (INVALID_ARG) when it is beyond what a tensor can
 * hold, or when the tensor would take more than `maxBytes` (BYTES elements count 4 bytes
 * each, their length prefix: the least they take).
 */
export function checkedElementCount(
  input: string,
  datatype: DataType,
  shape: readonly number[],
  maxBytes = Number.POSITIVE_INFINITY,
): number {
  let count = 1;
  for (const dim of shape) count *= dim;
  if (count > MAX_TENSOR_ELEMENTS || !Number.isSafeInteger(count)) {
    throw invalidArg(
      `input '${input}' has shape ${shapeInMessage(shape)}, ${count} elements: more than the ${MAX_TENSOR_ELEMENTS} a tensor can hold`,
    );
  }
  if (datatype === "BYTES" && count > MAX_BYTES_ELEMENTS) {
    throw invalidArg(
      `input '${input}' has shape ${shapeInMessage(shape)}, ${count} BYTES elements: more than the ${MAX_BYTES_ELEMENTS} a BYTES tensor may have`,
    );
  }
  checkTensorBytes(input, datatype, shape, count * (elementByteSize(datatype) ?? 4), maxBytes);
  return count;
}

/** Refuses (INVALID_ARG) a tensor of `bytes` bytes when that is more than `maxBytes`. */
function checkTensorBytes(
  input: string,
  datatype: DataType,
  shape: readonly number[],
  bytes: number,
  maxBytes: number,
): void {
  if (bytes > maxBytes) {
    throw invalidArg(
      `input '${input}' has shape ${shapeInMessage(shape)}: ${bytes} bytes of ${datatype}, more than the ${maxBytes} bytes a request may carry`,
    );
  }
}
