import { createRequire } from "node:module";

// ONNX Runtime builds a session with tens of megabytes of short-lived native allocations,
// made on the loading worker's malloc arena. glibc keeps what a thread frees inside its
// arena for reuse and gives back only the arena's top: with the example models, two
// worker threads' arenas went on holding 14 MB of freed memory once their sessions were
// built, for the life of the server. malloc_trim(0) hands the free pages of every arena
// back to the system. Node cannot call it without native code, so koffi (a maintained
// foreign-function library with prebuilt binaries) does, loaded only on Linux and only
// once a model has loaded or unloaded. Where malloc_trim is missing (musl) or the
// platform is another, nothing is trimmed: those allocators differ, and the server runs
// as before.

/** Returns freed native heap memory to the system; false when this platform cannot. */
export type TrimNativeHeap = () => boolean;

/** Trims a moment after the last of a burst of loads and unloads, once for the burst. */
export class NativeHeapTrimmer {
  readonly #trim: TrimNativeHeap;
  readonly #delayMs: number;
  #timer: NodeJS.Timeout | undefined;
  #unavailable = false;

  constructor(trim: TrimNativeHeap = glibcMallocTrim, delayMs = 500) {
    this.#trim = trim;
    this.#delayMs = delayMs;
  }

  /** Native memory was freed (a session built or released, a worker ended): trim once things settle. */
  soon(): void {
    if (this.#unavailable) return;
    clearTimeout(this.#timer);
    // Unreferenced: a pending trim never keeps the process alive.
    this.#timer = setTimeout(() => {
      this.#timer = undefined;
      if (!this.#trim()) this.#unavailable = true;
    }, this.#delayMs).unref();
  }
}

/** The trimmer of the process's model worker threads. */
export const workerHeapTrimmer = new NativeHeapTrimmer();

let mallocTrim: ((pad: number) => number) | null | undefined;

/** glibc's malloc_trim(0), through koffi; false where it is not found. */
export function glibcMallocTrim(): boolean {
  if (mallocTrim === undefined) mallocTrim = process.platform === "linux" ? bindMallocTrim() : null;
  if (mallocTrim === null) return false;
  mallocTrim(0);
  return true;
}

function bindMallocTrim(): ((pad: number) => number) | null {
  try {
    const koffi = createRequire(import.meta.url)("koffi") as typeof import("koffi");
    return koffi.load("libc.so.6").func("int malloc_trim(size_t pad)") as (pad: number) => number;
  } catch {
    // musl has no libc.so.6 nor malloc_trim; a platform without koffi's binary lands here too.
    return null;
  }
}
