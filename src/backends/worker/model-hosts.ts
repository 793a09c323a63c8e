import type { ResourceLimits } from "node:worker_threads";
import { ModelHost } from "./model-host.ts";
import { type HeapTrimmer, workerHeapTrimmer } from "./native-heap.ts";

// Which worker thread hosts each model instance. A worker costs about 14 MB before its
// model does (8.6 MB for the thread, 5.7 MB for ONNX Runtime's binding), and runs one
// model at a time; threads beyond the CPU's cores add memory, not speed. So instances get
// threads of their own up to `maxHosts` (the server's --onnx-worker-threads, the number of
// CPUs by default); past that they share, each placed on the host with the fewest
// instances of its own model, then on one holding its session key, then the fewest in all,
// so that a model's instances run in parallel wherever they can. Instances that share a
// thread take turns on it. With `maxHosts` 0 every instance has a thread of its own.

export class ModelHosts {
  readonly #entry: URL;
  readonly #maxHosts: number;
  readonly #resourceLimits: ResourceLimits | undefined;
  readonly #trimmer: HeapTrimmer;
  readonly #hosts: ModelHost[] = [];

  /** `resourceLimits` bound each thread's JS heap: a thread that outgrows it dies and is replaced. */
  constructor(
    entry: URL,
    maxHosts: number,
    resourceLimits?: ResourceLimits,
    trimmer: HeapTrimmer = workerHeapTrimmer,
  ) {
    this.#entry = entry;
    this.#maxHosts = maxHosts;
    this.#resourceLimits = resourceLimits;
    this.#trimmer = trimmer;
  }

  /**
   * The host for the instance `instanceKey` of `modelName`, which holds it until the
   * instance closes. Instances with the same `session` key can likely share what they
   * load on one thread (onnx/session-keys.ts): another model's instance joins a thread
   * that holds its key rather than take a thread of its own, since it would likely add no
   * model there.
   */
  place(modelName: string, instanceKey: string, session?: string): ModelHost {
    let best: ModelHost | undefined;
    let bestKey = [Number.POSITIVE_INFINITY, Number.POSITIVE_INFINITY, Number.POSITIVE_INFINITY];
    for (const host of this.#hosts) {
      let same = 0;
      let shares = false;
      for (const placed of host.placed.values()) {
        if (placed.model === modelName) same++;
        if (session !== undefined && placed.session === session) shares = true;
      }
      const key = [same, shares ? 0 : 1, host.placed.size];
      if (isBefore(key, bestKey)) {
        best = host;
        bestKey = key;
      }
    }
    const roomForMore = this.#maxHosts === 0 || this.#hosts.length < this.#maxHosts;
    // With no limit (`maxHosts` 0) every instance keeps a thread of its own, as promised.
    const joinsSession = this.#maxHosts !== 0 && bestKey[0] === 0 && bestKey[1] === 0;
    if (best === undefined || (best.placed.size > 0 && roomForMore && !joinsSession)) {
      best = new ModelHost(this.#entry, this.#resourceLimits, this.#trimmer);
      this.#hosts.push(best);
    }
    best.placed.set(
      instanceKey,
      session === undefined ? { model: modelName } : { model: modelName, session },
    );
    return best;
  }

  /** How many instances each host holds (for the log and the tests). */
  get sizes(): number[] {
    return this.#hosts.map((host) => host.placed.size);
  }
}

/** Whether placement key `a` sorts before `b`, field by field. */
function isBefore(a: readonly number[], b: readonly number[]): boolean {
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return a[i]! < b[i]!;
  return false;
}
