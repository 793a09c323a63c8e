import type { DataType } from "../../../core/datatype.ts";
import { invalidArg } from "../../../core/errors.ts";
import type { SharedMemoryRegions, SharedMemorySlice } from "../../../core/shared-memory.ts";
import type { Tensor } from "../../../core/tensor.ts";
import { checkRawByteLength, decodeRawTensor } from "../raw-tensor.ts";

// Tensors in shared memory, for the KServe decoders and encoders of HTTP and gRPC: an
// input's raw bytes read from the slice a request names, an output's raw bytes written to
// one. Each protocol reads the `shared_memory_*` parameters its own way.

/** What a frontend that serves shared memory gives its decoders. */
export interface SharedMemoryAccess {
  readonly regions: SharedMemoryRegions;
  /**
   * The most bytes one request's inputs may read from shared memory: the protocol's request
   * size limit, which the same tensors sent in the request would have had to fit.
   */
  readonly maxRequestBytes: number;
}

/** Where a request's outputs go that it asked to have written to shared memory. */
export interface SharedMemoryOutputs {
  readonly regions: SharedMemoryRegions;
  readonly slices: ReadonlyMap<string, SharedMemorySlice>;
}

/** Reads one request's inputs from shared memory, all of them within one byte budget. */
export class SharedMemoryInputReader {
  readonly #access: SharedMemoryAccess;
  #left: number;

  constructor(access: SharedMemoryAccess) {
    this.#access = access;
    this.#left = access.maxRequestBytes;
  }

  read(name: string, datatype: DataType, shape: readonly number[], slice: SharedMemorySlice): Tensor {
    const regions = this.#access.regions;
    regions.check(slice);
    // Sizes are checked before the bytes are copied: a region may be far larger than a
    // request could be.
    checkRawByteLength(name, datatype, shape, slice.byteSize);
    if (slice.byteSize > this.#left) {
      throw invalidArg(
        `input '${name}' reads ${slice.byteSize} bytes from shared memory region '${slice.region}': the request's inputs may take at most ${this.#access.maxRequestBytes} bytes, as much as a request may carry`,
      );
    }
    this.#left -= slice.byteSize;
    return decodeRawTensor(name, datatype, shape, regions.read(slice));
  }
}
