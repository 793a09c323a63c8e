import { availableParallelism } from "node:os";

// ONNX Runtime builds a session with tens of megabytes of short-lived native allocations,
// made on the loading worker's malloc arena. glibc keeps what a thread frees inside its
// arena for reuse and gives back only the arena's top: with the example models, two
// worker threads' arenas went on holding 14 MB of freed memory once their sessions were
// built, for the life of the server. malloc_trim(0) hands the free pages of every arena
// back to the system. Node cannot call it without native code, so koffi (a maintained
// foreign-function library with prebuilt binaries, an optional dependency) does, loaded
// only on Linux, as the server starts (where it also caps the number of arenas, below).
// Where koffi or malloc_trim is missing (musl) or the platform is another, nothing is
// trimmed or capped: those allocators differ, and the server runs as before.

/**
 * Returns freed native heap memory to the system; false when this platform cannot. Called
 * with `bindOnly`, it only gets ready to, so that the first trim is as short as the others.
 */
export type TrimNativeHeap = (bindOnly?: boolean) => Promise<boolean>;

/** Told when native memory was freed (a session built or released, a worker ended). */
export interface HeapTrimmer {
  soon(): void;
}

/** Trims a moment after the last of a burst of loads and unloads, once for the burst. */
export class NativeHeapTrimmer implements HeapTrimmer {
  readonly #trim: TrimNativeHeap;
  readonly #delayMs: number;
  #timer: NodeJS.Timeout | undefined;
  #bound = false;
  #unavailable = false;

  constructor(trim: TrimNativeHeap = glibcMallocTrim, delayMs = 500) {
    this.#trim = trim;
    this.#delayMs = delayMs;
  }

  /** Native memory was freed: trim once things settle. */
  soon(): void {
    if (this.#unavailable) return;
    if (!this.#bound) {
      // Loading koffi takes tens of milliseconds of the main thread: done at the first
      // load, while the server is starting, rather than in the first trim.
      this.#bound = true;
      this.#settle(this.#trim(true));
    }
    clearTimeout(this.#timer);
    // Unreferenced: a pending trim never keeps the process alive.
    this.#timer = setTimeout(() => {
      this.#timer = undefined;
      if (!this.#unavailable) this.#settle(this.#trim());
    }, this.#delayMs).unref();
  }

  /** Where trimming cannot be done (or failed), it is not tried again. */
  #settle(trimming: Promise<boolean>): void {
    trimming.then(
      (possible) => {
        if (!possible) this.#unavailable = true;
      },
      () => {
        this.#unavailable = true;
      },
    );
  }
}

/** The trimmer of the process's model worker threads. */
export const workerHeapTrimmer = new NativeHeapTrimmer();

interface Glibc {
  mallocTrim(pad: number): number;
  mallopt(param: number, value: number): number;
}

let glibc: Promise<Glibc | null> | undefined;

function bindGlibc(): Promise<Glibc | null> {
  glibc ??= process.platform === "linux" ? loadGlibc() : Promise.resolve(null);
  return glibc;
}

/** glibc's malloc_trim(0), through koffi; false where it is not found. */
export async function glibcMallocTrim(bindOnly = false): Promise<boolean> {
  const libc = await bindGlibc();
  if (libc === null) return false;
  if (!bindOnly) libc.mallocTrim(0);
  return true;
}

/** mallopt's parameter for the most arenas glibc makes. */
const M_ARENA_MAX = -8;

/**
 * Caps the malloc arenas of the process at one per core, before the model threads start.
 * glibc gives a thread that allocates while others hold the arenas an arena of its own,
 * up to 8 per core, and each keeps what its threads freed and its own fragmentation (with
 * the example models, 6 MB of the idle server after trimming). One per core is as many
 * as can allocate at once. An operator's MALLOC_ARENA_MAX, read by glibc itself, is left
 * as given. Returns false where it cannot be set.
 */
export async function capMallocArenas(
  cores: number = availableParallelism(),
  environment: NodeJS.ProcessEnv = process.env,
): Promise<boolean> {
  if (environment.MALLOC_ARENA_MAX !== undefined) return false;
  const libc = await bindGlibc();
  return libc !== null && libc.mallopt(M_ARENA_MAX, Math.max(1, cores)) === 1;
}

async function loadGlibc(): Promise<Glibc | null> {
  try {
    const { default: koffi } = await import("koffi");
    const libc = koffi.load("libc.so.6");
    return {
      mallocTrim: libc.func("int malloc_trim(size_t pad)") as Glibc["mallocTrim"],
      mallopt: libc.func("int mallopt(int param, int value)") as Glibc["mallopt"],
    };
  } catch {
    // musl has no libc.so.6 nor malloc_trim; a platform without koffi's binary lands here too.
    return null;
  }
}
