import { closeSync, constants, fstatSync, openSync, readFileSync, readSync, writeSync } from "node:fs";
import { join } from "node:path";
import { internal, invalidArg, notFound, ServerError } from "../core/errors.ts";
import type { Refusals } from "../core/refusals.ts";
import {
  CLIENT_SHM_DISABLED,
  type SharedMemoryRegionStatus,
  type SharedMemoryRegions,
  type SharedMemorySlice,
  type SharedMemoryUse,
} from "../core/shared-memory.ts";

// Triton's system shared memory on Linux: a region is a slice of a POSIX shared-memory
// object, which is a file in /dev/shm (what shm_open opens). Triton maps the slice into its
// address space; Node cannot map memory, so seqserve keeps the object open and reads and
// writes the slice with pread / pwrite. On tmpfs these are one memory copy each, the same
// pages the client has mapped: what the client wrote before the request is what is read,
// and what the server wrote is there when the client reads the answer. The messages are
// Triton's (shared_memory_manager.cc).
//
// With API keys, a region belongs to the key that registered it, as a sequence belongs to
// the key that started it: another key can neither read nor write it in a request, see it
// listed, nor unregister it (PERMISSION_DENIED), and cannot register regions of its
// object while it is registered. Region names are one namespace, as in Triton, and
// guessable (tritonclient's examples use `input_data`); without ownership any key could
// read another's inputs or overwrite its outputs by naming them. A region registered
// without a key (no keys, or the shared-memory API open) belongs to no one: any caller
// may use it.

/** Where POSIX shared-memory objects live on Linux. */
const SHM_DIRECTORY = "/dev/shm";
/** Keys Triton keeps for its own regions (the Python backend's). */
const RESERVED_PREFIX = "triton_python_backend_shm_region_";
/** The longest file name shm_open takes (NAME_MAX). */
const NAME_MAX = 255;

/**
 * The memory page size, which Triton's mmap of a region needs its offset to be a multiple
 * of: the kernel's AT_PAGESZ from /proc/self/auxv (64 KiB on some ARM kernels), else 4 KiB.
 */
function pageSize(): number {
  const AT_PAGESZ = 6n;
  try {
    const auxv = readFileSync("/proc/self/auxv");
    for (let at = 0; at + 16 <= auxv.length; at += 16) {
      if (auxv.readBigUInt64LE(at) === AT_PAGESZ) return Number(auxv.readBigUInt64LE(at + 8));
    }
  } catch {
    // Not Linux: the usual size.
  }
  return 4096;
}

export const PAGE_SIZE = pageSize();

export interface SystemSharedMemoryOptions {
  /** Whether clients may register regions (Triton's `--allow-client-shm`). */
  readonly clientRegistration: boolean;
  /** Regions registered at once, at most (each may hold a descriptor open). */
  readonly maxRegions: number;
  /** Bytes read from shared memory by requests not yet done, server-wide, at most. */
  readonly maxBytes: number;
  /** Where refusals by these limits are counted. */
  readonly refusals?: Refusals | undefined;
  /** Stands in for /dev/shm in tests. */
  readonly directory?: string;
}

/** An open shared-memory object, shared by the regions registered on it. */
interface OpenObject {
  readonly fd: number;
  /** `device:inode`: a key registered twice (or under two names) is one object. */
  readonly id: string;
  regions: number;
}

interface Region extends SharedMemoryRegionStatus {
  readonly object: OpenObject;
  /** The API key's name that registered it; undefined registered without one. */
  readonly owner: string | undefined;
  /** Requests holding the region. */
  users: number;
  /** Unregistered while requests held it: it goes when the last one is done. */
  unregistering: boolean;
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

const disabled = (): ServerError => new ServerError("UNSUPPORTED", CLIENT_SHM_DISABLED);

/** Whether `principal` may use, list and unregister `region`: its own, or no one's. */
const mayUse = (region: Region, principal: string | undefined): boolean =>
  region.owner === undefined || region.owner === principal;

const notOwned = (name: string): ServerError =>
  new ServerError(
    "PERMISSION_DENIED",
    `shared memory region '${name}' belongs to another caller: only the API key that registered it may use, list or unregister it`,
  );

export class SystemSharedMemory implements SharedMemoryRegions {
  readonly clientRegistration: boolean;
  readonly #options: SystemSharedMemoryOptions;
  readonly #directory: string;
  readonly #regions = new Map<string, Region>();
  readonly #objects = new Map<string, OpenObject>();
  /** Bytes read by requests not yet released. */
  #bytesHeld = 0;

  constructor(options: SystemSharedMemoryOptions) {
    this.clientRegistration = options.clientRegistration;
    this.#options = options;
    this.#directory = options.directory ?? SHM_DIRECTORY;
  }

  register(name: string, key: string, offset: number, byteSize: number, principal?: string): void {
    if (!this.clientRegistration) throw disabled();
    if (name === "") {
      throw invalidArg("'region name' is necessary to register system shared memory region");
    }
    const file = join(this.#directory, objectName(name, key));
    if (this.#regions.has(name)) {
      throw new ServerError("ALREADY_EXISTS", `shared memory region '${name}' already in manager`);
    }
    if (this.#regions.size >= this.#options.maxRegions) {
      this.#options.refusals?.refused("shared_memory_regions");
      throw new ServerError(
        "RESOURCE_EXHAUSTED",
        `failed to register shared memory region '${name}': ${this.#regions.size} regions are registered, the server's limit (--max-shared-memory-regions)`,
      );
    }
    let fd: number;
    try {
      // As shm_open opens it: read-write, and never through a symbolic link.
      fd = openSync(file, constants.O_RDWR | constants.O_NOFOLLOW);
    } catch {
      throw unableToOpen(key);
    }
    let object: OpenObject;
    try {
      const stat = fstatSync(fd);
      if (!stat.isFile()) throw internal(`Invalid shared memory region: '${key}'`);
      if (offset + byteSize > stat.size) {
        throw invalidArg(`failed to register shared memory region '${name}': invalid args`);
      }
      // What Triton's mmap of the region refuses (EINVAL), in its words: a client tested
      // here must not fail on Triton.
      if (byteSize === 0 || offset % PAGE_SIZE !== 0) {
        throw invalidArg(
          `failed to register shared memory region '${name}': unable to process address spaceInvalid argument`,
        );
      }
      const id = `${stat.dev}:${stat.ino}`;
      const open = this.#objects.get(id);
      // Its regions' bytes are another key's: registering the object anew would read them.
      if (open !== undefined && this.#ownedByAnother(open, principal)) {
        throw new ServerError(
          "PERMISSION_DENIED",
          `failed to register shared memory region '${name}': its key '${key}' is registered by another caller, only the API key that registered it may register it again`,
        );
      }
      if (open === undefined) {
        object = { fd, id, regions: 0 };
        this.#objects.set(id, object);
      } else {
        // One descriptor per object, however many regions it has.
        closeSync(fd);
        object = open;
      }
    } catch (error) {
      closeSync(fd);
      throw error;
    }
    object.regions++;
    this.#regions.set(name, {
      name,
      key,
      offset,
      byteSize,
      object,
      owner: principal,
      users: 0,
      unregistering: false,
    });
  }

  unregister(name?: string, principal?: string): void {
    if (!this.clientRegistration) throw disabled();
    let regions: Region[];
    if (name === undefined) {
      // Every region the caller may unregister; another key's stay.
      regions = [...this.#regions.values()].filter((region) => mayUse(region, principal));
    } else {
      const region = this.#regions.get(name);
      if (region === undefined) return;
      if (!mayUse(region, principal)) throw notOwned(name);
      regions = [region];
    }
    for (const region of regions) {
      if (region.users > 0) region.unregistering = true;
      else this.#remove(region);
    }
  }

  status(name?: string, principal?: string): SharedMemoryRegionStatus[] {
    let regions: Region[];
    if (name === undefined) {
      regions = [...this.#regions.values()].filter((region) => mayUse(region, principal));
    } else {
      const region = this.#regions.get(name);
      if (region === undefined) throw notFound(`Unable to find system shared memory region: '${name}'`);
      if (!mayUse(region, principal)) throw notOwned(name);
      regions = [region];
    }
    return regions.map(({ name, key, offset, byteSize }) => ({ name, key, offset, byteSize }));
  }

  use(principal?: string): SharedMemoryUse {
    return new RequestUse(this, principal);
  }

  close(): void {
    for (const object of this.#objects.values()) closeSync(object.fd);
    this.#objects.clear();
    this.#regions.clear();
  }

  // For RequestUse: the region a request names, the server-wide count of bytes read, and
  // a request letting a region go.

  /**
   * The slice's region, with the slice checked against it. A region being unregistered is
   * not found: only the requests already holding it finish with it, so traffic cannot
   * keep it, its descriptor and its name, for ever. Another key's region is refused before
   * the slice is checked, so the refusal says nothing of its size.
   */
  region(slice: SharedMemorySlice, principal: string | undefined): Region {
    const region = this.#regions.get(slice.region);
    if (region === undefined || region.unregistering) {
      throw notFound(`Unable to find shared memory region: '${slice.region}'`);
    }
    if (!mayUse(region, principal)) throw notOwned(slice.region);
    return checkSlice(region, slice);
  }

  /** Counts `bytes` about to be read against the server's bound. */
  take(bytes: number): void {
    const max = this.#options.maxBytes;
    if (this.#bytesHeld + bytes > max) {
      this.#options.refusals?.refused("shared_memory_bytes");
      throw new ServerError(
        "RESOURCE_EXHAUSTED",
        `reading ${bytes} bytes from shared memory would take the bytes read by requests in flight past the server's limit of ${max} (--max-shared-memory-bytes)`,
      );
    }
    this.#bytesHeld += bytes;
  }

  give(bytes: number): void {
    this.#bytesHeld -= bytes;
  }

  /** A request let `region` go. */
  leave(region: Region): void {
    region.users--;
    if (region.users === 0 && region.unregistering) this.#remove(region);
  }

  /** Whether a region of `object` is one `principal` may not use. */
  #ownedByAnother(object: OpenObject, principal: string | undefined): boolean {
    for (const region of this.#regions.values()) {
      if (region.object === object && !mayUse(region, principal)) return true;
    }
    return false;
  }

  #remove(region: Region): void {
    if (this.#regions.get(region.name) === region) this.#regions.delete(region.name);
    const object = region.object;
    object.regions--;
    if (object.regions === 0 && this.#objects.get(object.id) === object) {
      this.#objects.delete(object.id);
      closeSync(object.fd);
    }
  }
}

/** `region`, when `slice` lies in it (Triton's GetMemoryInfo). */
function checkSlice(region: Region, slice: SharedMemorySlice): Region {
  if (slice.offset >= region.byteSize) {
    throw invalidArg(`Invalid offset for shared memory region: '${slice.region}'`);
  }
  if (slice.offset + slice.byteSize > region.byteSize) {
    throw invalidArg(`Invalid offset + byte size for shared memory region: '${slice.region}'`);
  }
  return region;
}

/** The end of a region's slice in its object, checked against the object's size now. */
function checkedEnd(region: Region, slice: SharedMemorySlice): number {
  const end = region.offset + slice.offset + slice.byteSize;
  if (fstatSync(region.object.fd).size < end) {
    // The client shrank the object after registering it (where Triton's mapping would fault).
    throw invalidArg(
      `shared memory region '${slice.region}' ends before the ${slice.byteSize} bytes at offset ${slice.offset}: its key '${region.key}' was truncated after it was registered`,
    );
  }
  return end;
}

class RequestUse implements SharedMemoryUse {
  readonly #regions: SystemSharedMemory;
  /** The request's caller: it reaches only the regions it may use. */
  readonly #principal: string | undefined;
  /** The regions held, by name as the request named them. */
  readonly #held = new Map<string, Region>();
  #bytes = 0;
  #released = false;

  constructor(regions: SystemSharedMemory, principal: string | undefined) {
    this.#regions = regions;
    this.#principal = principal;
  }

  hold(slice: SharedMemorySlice): void {
    this.#region(slice);
  }

  read(slice: SharedMemorySlice): Uint8Array {
    const region = this.#region(slice);
    checkedEnd(region, slice);
    this.#regions.take(slice.byteSize);
    this.#bytes += slice.byteSize;
    // A buffer of its own (not a slab of Node's pool), so it can move to a worker thread.
    const bytes = Buffer.allocUnsafeSlow(slice.byteSize);
    const start = region.offset + slice.offset;
    let done = 0;
    while (done < bytes.byteLength) {
      const read = readSync(region.object.fd, bytes, done, bytes.byteLength - done, start + done);
      if (read === 0) checkedEnd(region, slice);
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
    // Through the region held since the request was read: unregistered meanwhile, it is
    // still open; registered again under its name, the new one is not written.
    const region = this.#region(slice);
    checkedEnd(region, slice);
    const start = region.offset + slice.offset;
    let done = 0;
    while (done < bytes.byteLength) {
      done += writeSync(region.object.fd, bytes, done, bytes.byteLength - done, start + done);
    }
  }

  release(): void {
    if (this.#released) return;
    this.#released = true;
    this.#regions.give(this.#bytes);
    for (const region of this.#held.values()) this.#regions.leave(region);
    this.#held.clear();
  }

  #region(slice: SharedMemorySlice): Region {
    if (this.#released) throw internal("a request's shared memory was used after it was released");
    const held = this.#held.get(slice.region);
    if (held !== undefined) return checkSlice(held, slice);
    const region = this.#regions.region(slice, this.#principal);
    region.users++;
    this.#held.set(slice.region, region);
    return region;
  }
}
