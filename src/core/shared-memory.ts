// Memory a client shares with the server (Triton's system shared memory extension): the
// client registers a named region, then a request names a slice of a region instead of
// carrying an input's bytes, or asks for an output to be written into one. The frontends
// read the slices while decoding and write them while encoding; nothing below them knows.

/** Why a registration is refused where clients may not register regions (Triton's words). */
export const CLIENT_SHM_DISABLED =
  "Client shared memory is disabled. Start the server with '--allow-client-shm=true' to enable.";

/** A registered region, as the status APIs list it. */
export interface SharedMemoryRegionStatus {
  readonly name: string;
  /** The POSIX shared-memory key the client created (`/input_data`). */
  readonly key: string;
  /** Where the region starts in the key's object. */
  readonly offset: number;
  readonly byteSize: number;
}

/** A slice of a registered region: where a request's input is read or an output written. */
export interface SharedMemorySlice {
  readonly region: string;
  /** From the region's start. */
  readonly offset: number;
  readonly byteSize: number;
}

/**
 * The regions clients registered. `principal` is the caller, by its API key's name
 * (undefined without one, as InferRequest.principal): a region registered with a key
 * belongs to it, and another caller's use, status or unregister of it is refused
 * (PERMISSION_DENIED); one registered without a key is any caller's.
 */
export interface SharedMemoryRegions {
  /** Whether clients may register regions (Triton's `--allow-client-shm`). */
  readonly clientRegistration: boolean;
  register(name: string, key: string, offset: number, byteSize: number, principal?: string): void;
  /**
   * Unregisters one region, or every region the caller may when `name` is undefined; an
   * unknown name is no error. A region a request still uses goes when the last such
   * request is done (Triton's "awaiting unregister"): until then its name stays taken and
   * its slices keep working for those requests; new requests no longer find it.
   */
  unregister(name?: string, principal?: string): void;
  /** Every region the caller may see, or the one named (NOT_FOUND when there is none). */
  status(name?: string, principal?: string): SharedMemoryRegionStatus[];
  /** What one request of `principal` reads and writes, held for it until it is released. */
  use(principal?: string): SharedMemoryUse;
  /** Unregisters every region at once (the server is stopping). */
  close(): void;
}

/**
 * One request's hold on the regions it names: each region stays open while the request
 * runs, and the bytes it read count against the server's bound until it is released.
 */
export interface SharedMemoryUse {
  /** Checks that `slice` lies in a registered region (NOT_FOUND / INVALID_ARG) and holds the region. */
  hold(slice: SharedMemorySlice): void;
  /** The slice's bytes, copied into a buffer of their own (the region held). */
  read(slice: SharedMemorySlice): Uint8Array;
  /** Writes `bytes` at the start of a slice held before; `output` names the tensor in errors. */
  write(slice: SharedMemorySlice, output: string, bytes: Uint8Array): void;
  /** Lets the regions go and returns the bytes read to the server's bound; idempotent. */
  release(): void;
}
