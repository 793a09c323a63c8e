import type { DataType } from "../../../core/datatype.ts";
import type { ModelConfig } from "../../../core/model-config.ts";
import { checkInputDescription } from "../../../core/request-validation.ts";
import type { SharedMemoryRegions, SharedMemorySlice, SharedMemoryUse } from "../../../core/shared-memory.ts";
import type { Tensor } from "../../../core/tensor.ts";
import { checkRawByteLength, decodeRawTensor } from "../raw-tensor.ts";

// Tensors in shared memory, for the KServe decoders and encoders of HTTP and gRPC: an
// input's raw bytes read from the slice a request names, an output's raw bytes written to
// one. Each protocol reads the `shared_memory_*` parameters its own way; what a request
// holds (its regions, the bytes it read) is released by its frontend once it is answered.

/** What a decoded request holds in shared memory, until its frontend releases `use`. */
export interface SharedMemoryHold {
  readonly use: SharedMemoryUse;
  /** The outputs to be written to shared memory (none when only inputs came from it). */
  readonly outputs: ReadonlyMap<string, SharedMemorySlice>;
}

const NO_OUTPUTS: ReadonlyMap<string, SharedMemorySlice> = new Map();

/** One request's tensors in shared memory, while it is decoded. */
export class SharedMemoryRequest {
  readonly #regions: SharedMemoryRegions;
  readonly #config: ModelConfig;
  readonly #requestId: string;
  readonly #principal: string | undefined;
  #use: SharedMemoryUse | undefined;
  #outputs: Map<string, SharedMemorySlice> | undefined;

  /**
   * `config`: the request's model's, its inputs checked against it before they are read
   * (their messages name `requestId`, as Triton's).
   * The bytes a request reads are bounded by the regions' own limit on bytes read by
   * requests in flight (`--max-shared-memory-bytes`), not by the protocol's request size:
   * clients use shared memory for tensors larger than a request may be, as Triton allows.
   * `principal`: the request's caller, who reaches only its own regions (and no one's).
   */
  constructor(
    regions: SharedMemoryRegions,
    config: ModelConfig,
    requestId: string,
    principal: string | undefined,
  ) {
    this.#regions = regions;
    this.#config = config;
    this.#requestId = requestId;
    this.#principal = principal;
  }

  #used(): SharedMemoryUse {
    this.#use ??= this.#regions.use(this.#principal);
    return this.#use;
  }

  read(name: string, datatype: DataType, shape: readonly number[], slice: SharedMemorySlice): Tensor {
    const use = this.#used();
    use.hold(slice);
    // Everything is checked before the bytes are copied: a request of a few bytes can name
    // a region far larger than any request could be.
    checkInputDescription(this.#config, this.#requestId, name, { datatype, shape });
    const request = { config: this.#config, requestId: this.#requestId };
    checkRawByteLength(name, datatype, shape, slice.byteSize, request);
    return decodeRawTensor(name, datatype, shape, use.read(slice), request);
  }

  /**
   * Output `name` goes to `slice`, checked against its region before the model runs (a step
   * that ran but could not be returned would still have advanced its sequence).
   */
  placeOutput(name: string, slice: SharedMemorySlice): void {
    this.#used().hold(slice);
    this.#outputs ??= new Map();
    this.#outputs.set(name, slice);
  }

  /** What the decoded request holds; undefined when it named no region. */
  hold(): SharedMemoryHold | undefined {
    return this.#use && { use: this.#use, outputs: this.#outputs ?? NO_OUTPUTS };
  }

  /** Lets go of what was held, for a request refused while it was decoded. */
  release(): void {
    this.#use?.release();
  }
}
