import type { ResourceLimits, Worker } from "node:worker_threads";
import type { FromWorkerMessage, ToWorkerMessage } from "./messages.ts";
import { type HeapTrimmer, workerHeapTrimmer } from "./native-heap.ts";
import { spawnWorker } from "./spawn-worker.ts";

// One worker thread hosting model instances, its tenants (worker-executor.ts). A tenant
// attaches to the host's current worker, starting it if none runs, and gets a link: what
// it posts goes to that worker, what the worker says about its instance comes back to it.
// When the worker stops (crash, out of memory), every tenant on it hears so and may
// attach again (a fresh worker). A tenant that releases its link unloads its model; the
// last one to leave ends the worker, by asking it to close (see worker-executor.ts for
// why a worker is never terminated). Instances that share a host take turns on its
// thread: model-hosts.ts places them. A load, an unload or a worker's end leaves native
// memory freed, which the host's trimmer hands back to the system (native-heap.ts).

export interface Tenant {
  onMessage(message: FromWorkerMessage): void;
  /** The worker stopped while the tenant was on it. */
  onExit(code: number, error: Error | undefined): void;
}

/** An instance placed on a host: its model's name, and the key of the session it may share. */
export interface Placement {
  readonly model: string;
  readonly session?: string;
}

/** A tenant's hold on the worker it attached to. */
export interface HostLink {
  post(message: ToWorkerMessage, transfer?: ArrayBuffer[]): void;
  /** Whether the tenant has work under way: the worker keeps the process alive while any has. */
  setBusy(busy: boolean): void;
  /** Unloads the tenant's model; resolves once the worker no longer holds it, or has ended. */
  release(): Promise<void>;
}

/** A worker with what is unloading from it: answers and the exit of a worker being closed still settle its unloads. */
interface HostedWorker {
  readonly worker: Worker;
  /** Instances unloading from this worker, resolved when it says so or ends. */
  readonly unloading: Map<string, () => void>;
  readonly exited: Promise<void>;
}

class Link implements HostLink {
  busy = true;
  released = false;
  constructor(
    readonly host: ModelHost,
    readonly hosted: HostedWorker,
    readonly instanceKey: string,
    readonly tenant: Tenant,
  ) {}

  post(message: ToWorkerMessage, transfer?: ArrayBuffer[]): void {
    this.hosted.worker.postMessage(message, transfer);
  }

  setBusy(busy: boolean): void {
    this.busy = busy;
    this.host.updateReference();
  }

  release(): Promise<void> {
    return this.host.release(this);
  }
}

export class ModelHost {
  readonly #entry: URL;
  readonly #resourceLimits: ResourceLimits | undefined;
  readonly #trimmer: HeapTrimmer;
  #current: HostedWorker | undefined;
  #lastError: Error | undefined;
  #referenced = true;
  /** The tenants on the current worker, by instance key. */
  readonly #links = new Map<string, Link>();
  /** Instances placed here (by model-hosts.ts), by key. */
  readonly placed = new Map<string, Placement>();

  constructor(entry: URL, resourceLimits?: ResourceLimits, trimmer: HeapTrimmer = workerHeapTrimmer) {
    this.#entry = entry;
    this.#resourceLimits = resourceLimits;
    this.#trimmer = trimmer;
  }

  /** Attaches `instanceKey` to the current worker, starting one if none runs. */
  attach(instanceKey: string, tenant: Tenant): HostLink {
    const hosted = this.#current ?? this.#start();
    const link = new Link(this, hosted, instanceKey, tenant);
    this.#links.set(instanceKey, link);
    this.updateReference();
    return link;
  }

  #start(): HostedWorker {
    const limits = this.#resourceLimits;
    const worker = spawnWorker(this.#entry, limits === undefined ? {} : { resourceLimits: limits });
    const unloading = new Map<string, () => void>();
    const exited = new Promise<void>((resolve) => worker.once("exit", () => resolve()));
    const hosted: HostedWorker = { worker, unloading, exited };
    this.#current = hosted;
    this.#lastError = undefined;
    this.#referenced = true;
    worker.on("message", (message: FromWorkerMessage) => {
      if (message.type === "unloaded") {
        unloading.get(message.instanceKey)?.();
        unloading.delete(message.instanceKey);
        this.updateReference();
        this.#trimmer.soon();
        return;
      }
      if (message.type === "loaded") this.#trimmer.soon();
      if (hosted === this.#current) this.#links.get(message.instanceKey)?.tenant.onMessage(message);
    });
    worker.on("error", (error) => {
      if (hosted === this.#current) this.#lastError = error;
    });
    worker.on("exit", (code) => {
      this.#trimmer.soon();
      for (const unloaded of unloading.values()) unloaded();
      unloading.clear();
      if (hosted !== this.#current) return;
      this.#current = undefined;
      const links = [...this.#links.values()];
      this.#links.clear();
      for (const link of links) link.tenant.onExit(code, this.#lastError);
    });
    return hosted;
  }

  release(link: Link): Promise<void> {
    if (link.released) return Promise.resolve();
    link.released = true;
    const { hosted } = link;
    if (hosted !== this.#current || this.#links.get(link.instanceKey) !== link) return Promise.resolve();
    this.#links.delete(link.instanceKey);
    if (this.#links.size === 0) {
      // The last tenant: the worker ends once the runs it holds are done (and answers the
      // unloads still under way on it). A tenant that attaches meanwhile gets a fresh worker.
      this.#current = undefined;
      hosted.worker.ref();
      hosted.worker.postMessage({ type: "close" });
      return hosted.exited;
    }
    const unloaded = new Promise<void>((resolve) => hosted.unloading.set(link.instanceKey, resolve));
    hosted.worker.postMessage({ type: "unload", instanceKey: link.instanceKey });
    this.updateReference();
    return Promise.race([unloaded, hosted.exited]);
  }

  // An idle worker must not keep the process alive (a server that forgot to close a model
  // still exits); one with a tenant loading, running or unloading must, or an answer could
  // be lost.
  updateReference(): void {
    const hosted = this.#current;
    if (hosted === undefined) return;
    const { worker } = hosted;
    let busy = hosted.unloading.size > 0;
    for (const link of this.#links.values()) busy ||= link.busy;
    if (busy === this.#referenced) return;
    this.#referenced = busy;
    if (busy) worker.ref();
    else worker.unref();
  }
}
