import { closeSync, constants, fstatSync, openSync, readSync, writeSync } from "node:fs";
import { join } from "node:path";
import { internal, invalidArg, notFound, ServerError } from "../core/errors.ts";
import {
  CLIENT_SHM_DISABLED,
  type SharedMemoryRegionStatus,
  type SharedMemoryRegions,
  type SharedMemorySlice,
} from "../core/shared-memory.ts";

// Triton's system shared memory on Linux: a region is a slice of a POSIX shared-memory
// object, which is a file in /dev/shm (what shm_open opens). Triton maps the slice into its
// address space; Node cannot map memory, so seqserve keeps the object open and reads and
// writes the slice with pread / pwrite. On tmpfs these are one memory copy each, the same
// pages the client has mapped: what the client wrote before the request is what is read,
// and what the server wrote is there when the client reads the answer. The messages are
// Triton's (shared_memory_manager.cc).

/** Where POSIX shared-memory objects live on Linux. */
const SHM_DIRECTORY = "/dev/shm";
/** Keys Triton keeps for its own regions (the Python backend's). */
const RESERVED_PREFIX = "triton_python_backend_shm_region_";
/** The longest file name shm_open takes (NAME_MAX). */
const NAME_MAX = 255;

interface Region extends SharedMemoryRegionStatus {
  readonly fd: number;
}

/** The object's file name, as shm_open finds it: leading slashes dropped, no other slash. */
function objectName(name: string, key: string): string {
  const bare = key.replace(/^\/+/, "");
  if (bare === "") {
    throw invalidArg(`cannot register shared memory region '${name}' - invalid shm key '${key}'`);
  }
  if (bare.startsWith(RESERVED_PREFIX)) {
    throw invalidArg(
      `cannot register shared memory region '${name}' with key '${key}' as the key contains the reserved prefix '${RESERVED_PREFIX}'`,
    );
  }
  // shm_open refuses these (EINVAL / ENAMETOOLONG); as a path they would leave /dev/shm.
  if (bare.includes("/") || bare === "." || bare === ".." || bare.length > NAME_MAX || bare.includes("\0")) {
    throw unableToOpen(key);
  }
  return bare;
}

const unableToOpen = (key: string): ServerError => internal(`Unable to open shared memory region: '${key}'`);

export class SystemSharedMemory implements SharedMemoryRegions {
  readonly clientRegistration: boolean;
  readonly #directory: string;
  readonly #regions = new Map<string, Region>();

  /** `directory` is for tests on systems without /dev/shm. */
  constructor(clientRegistration: boolean, directory = SHM_DIRECTORY) {
    this.clientRegistration = clientRegistration;
    this.#directory = directory;
  }

  register(name: string, key: string, offset: number, byteSize: number): void {
    if (!this.clientRegistration) throw new ServerError("UNSUPPORTED", CLIENT_SHM_DISABLED);
    if (name === "") {
      throw invalidArg("'region name' is necessary to register system shared memory region");
    }
    const file = join(this.#directory, objectName(name, key));
    if (this.#regions.has(name)) {
      throw new ServerError("ALREADY_EXISTS", `shared memory region '${name}' already in manager`);
    }
    let fd: number;
    try {
      // As shm_open opens it: read-write, and never through a symbolic link.
      fd = openSync(file, constants.O_RDWR | constants.O_NOFOLLOW);
    } catch {
      throw unableToOpen(key);
    }
    try {
      const stat = fstatSync(fd);
      if (!stat.isFile()) throw internal(`Invalid shared memory region: '${key}'`);
      if (offset + byteSize > stat.size) {
        throw invalidArg(`failed to register shared memory region '${name}': invalid args`);
      }
    } catch (error) {
      closeSync(fd);
      throw error;
    }
    this.#regions.set(name, { name, key, offset, byteSize, fd });
  }

  unregister(name?: string): void {
    if (!this.clientRegistration) throw new ServerError("UNSUPPORTED", CLIENT_SHM_DISABLED);
    if (name === undefined) {
      this.close();
      return;
    }
    const region = this.#regions.get(name);
    if (region === undefined) return;
    this.#regions.delete(name);
    closeSync(region.fd);
  }

  status(name?: string): SharedMemoryRegionStatus[] {
    const regions = name === undefined ? [...this.#regions.values()] : [this.#named(name)];
    return regions.map(({ name, key, offset, byteSize }) => ({ name, key, offset, byteSize }));
  }

  check(slice: SharedMemorySlice): void {
    this.#region(slice);
  }

  read(slice: SharedMemorySlice): Uint8Array {
    const region = this.#region(slice);
    // A buffer of its own (not a slab of Node's pool), so it can move to a worker thread.
    const bytes = Buffer.allocUnsafeSlow(slice.byteSize);
    let done = 0;
    while (done < bytes.byteLength) {
      const read = readSync(
        region.fd,
        bytes,
        done,
        bytes.byteLength - done,
        region.offset + slice.offset + done,
      );
      if (read === 0) {
        // The client shrank the object after registering it (where Triton's mapping would fault).
        throw invalidArg(
          `shared memory region '${slice.region}' ends before the ${slice.byteSize} bytes at offset ${slice.offset}: its key '${region.key}' was truncated after it was registered`,
        );
      }
      done += read;
    }
    return bytes;
  }

  write(slice: SharedMemorySlice, output: string, bytes: Uint8Array): void {
    if (bytes.byteLength > slice.byteSize) {
      throw internal(
        `shared memory size specified with the request for output '${output}' (${slice.byteSize} bytes) should be at least ${bytes.byteLength} bytes to hold the results`,
      );
    }
    // Looked up again: the region may have been unregistered while the request ran, and its
    // descriptor closed (a file opened since may have the same number).
    const region = this.#region(slice);
    let done = 0;
    while (done < bytes.byteLength) {
      done += writeSync(region.fd, bytes, done, bytes.byteLength - done, region.offset + slice.offset + done);
    }
  }

  close(): void {
    for (const region of this.#regions.values()) closeSync(region.fd);
    this.#regions.clear();
  }

  #named(name: string): Region {
    const region = this.#regions.get(name);
    if (region === undefined) throw notFound(`Unable to find system shared memory region: '${name}'`);
    return region;
  }

  /** The slice's region, with the slice checked against it (Triton's GetMemoryInfo). */
  #region(slice: SharedMemorySlice): Region {
    const region = this.#regions.get(slice.region);
    if (region === undefined) throw notFound(`Unable to find shared memory region: '${slice.region}'`);
    if (slice.offset >= region.byteSize) {
      throw invalidArg(`Invalid offset for shared memory region: '${slice.region}'`);
    }
    if (slice.offset + slice.byteSize > region.byteSize) {
      throw invalidArg(`Invalid offset + byte size for shared memory region: '${slice.region}'`);
    }
    return region;
  }
}
