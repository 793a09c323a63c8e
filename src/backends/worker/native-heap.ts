// ONNX Runtime builds a session with tens of megabytes of short-lived native allocations,
// made on the loading worker's malloc arena. glibc keeps what a thread frees inside its
// arena for reuse and gives back only the arena's top: with the example models, two
// worker threads' arenas went on holding 14 MB of freed memory once their sessions were
// built, for the life of the server. malloc_trim(0) hands the free pages of every arena
// back to the system. Node cannot call it without native code, so koffi (a maintained
// foreign-function library with prebuilt binaries, an optional dependency) does, loaded
// only on Linux, when the first model loads. Where koffi or malloc_trim is missing (musl)
// or the platform is another, nothing is trimmed: those allocators differ, and the server
// runs as before.

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

type MallocTrim = (pad: number) => number;

let mallocTrim: Promise<MallocTrim | null> | undefined;

/** glibc's malloc_trim(0), through koffi; false where it is not found. */
export async function glibcMallocTrim(bindOnly = false): Promise<boolean> {
  mallocTrim ??= process.platform === "linux" ? bindMallocTrim() : Promise.resolve(null);
  const trim = await mallocTrim;
  if (trim === null) return false;
  if (!bindOnly) trim(0);
  return true;
}

async function bindMallocTrim(): Promise<MallocTrim | null> {
  try {
    const { default: koffi } = await import("koffi");
    return koffi.load("libc.so.6").func("int malloc_trim(size_t pad)") as MallocTrim;
  } catch {
    // musl has no libc.so.6 nor malloc_trim; a platform without koffi's binary lands here too.
    return null;
  }
}
