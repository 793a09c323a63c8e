import type { ResourceLimits } from "node:worker_threads";
import { asServerError, internal, ServerError, unavailable } from "../../core/errors.ts";
import type { ExecutionResult, ModelExecutor } from "../../core/executor.ts";
import type { ModelIo } from "../../core/model-io.ts";
import type { Tensor } from "../../core/tensor.ts";
import type { Logger } from "../../observability/logger.ts";
import {
  type FromWorkerMessage,
  instanceKeyOf,
  type LoadMessage,
  type ResultMessage,
  type RunMessage,
} from "./messages.ts";
import { type HostLink, ModelHost } from "./model-host.ts";
import { fromWire, toWire, type WireTensor } from "./wire-tensor.ts";

// One model instance hosted in a worker thread (model-host.ts), alone on it or sharing it
// with other instances. The executor loads the model there, forwards runs, and when the
// thread dies (crash, out of memory, exit) it fails the runs the thread held and loads the
// model on a fresh one, so a later run finds it loaded again.
//
// A worker is only ever ended by asking it to close, never with worker.terminate():
// onnxruntime-node aborts the whole process when a thread is terminated while its
// session.run() is in native code (the binding throws an uncaught C++ exception when it
// builds the outputs). For the same reason the process must not exit with runs in
// flight: close every executor first.

export interface WorkerExecutorOptions {
  /** The instance name, e.g. "simple_0". */
  readonly name: string;
  /** The worker's entry module. */
  readonly entry: URL;
  /** Sent first to every worker this executor loads its model on (with the executor's key). */
  readonly load: Omit<LoadMessage, "instanceKey">;
  /** Places the instance, by its key, on a host shared with others (model-hosts.ts); else it has a worker of its own. */
  readonly host?: (instanceKey: string) => ModelHost;
  /** Bounds the worker's JS heap (a worker of its own); a worker that outgrows it dies and is replaced. */
  readonly resourceLimits?: ResourceLimits;
  readonly logger: Logger;
}

interface PendingRun {
  readonly resolve: (result: ExecutionResult) => void;
  readonly reject: (error: ServerError) => void;
}

interface Loading {
  readonly promise: Promise<ModelIo>;
  readonly resolve: (io: ModelIo) => void;
  readonly reject: (error: ServerError) => void;
}

let executorCount = 0;

export class WorkerExecutor implements ModelExecutor {
  readonly name: string;
  readonly #options: WorkerExecutorOptions;
  readonly #logger: Logger;
  readonly #pending = new Map<number, PendingRun>();
  readonly #host: ModelHost;
  /** Names this executor's instance in its worker, where names may repeat. */
  readonly #key: string;
  #link: HostLink | undefined;
  /** Set while the current worker is loading the model. */
  #loading: Loading | undefined;
  #ready = false;
  /** What the model declares, once loaded. */
  #io: ModelIo | undefined;
  #sharesSession = false;
  #closed = false;
  #nextId = 1;
  /** A model being unloaded after a failed load, for close() to wait for. */
  #ending: Promise<void> | undefined;

  constructor(options: WorkerExecutorOptions) {
    this.name = options.name;
    this.#options = options;
    this.#logger = options.logger.child({ instance: options.name });
    this.#key = instanceKeyOf(options.name, ++executorCount);
    this.#host = options.host?.(this.#key) ?? new ModelHost(options.entry, options.resourceLimits);
  }

  /** Whether the instance runs on a session another instance on its thread loaded (as last loaded). */
  get sharesSession(): boolean {
    return this.#sharesSession;
  }

  /** Starts the worker and loads the model; resolves with the inputs and outputs it declares. */
  start(): Promise<ModelIo> {
    if (this.#closed) return Promise.reject(unavailable(`model instance '${this.name}' is closed`));
    if (this.#loading !== undefined) return this.#loading.promise;
    if (this.#ready && this.#io !== undefined) return Promise.resolve(this.#io);
    let resolve!: (io: ModelIo) => void;
    let reject!: (error: ServerError) => void;
    const promise = new Promise<ModelIo>((res, rej) => {
      resolve = res;
      reject = rej;
    });
    this.#loading = { promise, resolve, reject };
    const link: HostLink = this.#host.attach(this.#key, {
      onMessage: (message) => {
        if (link === this.#link) this.#onMessage(message);
      },
      onExit: (code, error) => this.#onExit(link, code, error),
    });
    this.#link = link;
    link.post({ ...this.#options.load, instanceKey: this.#key });
    return promise;
  }

  run(inputs: ReadonlyMap<string, Tensor>, outputNames: readonly string[]): Promise<ExecutionResult> {
    if (this.#closed) return Promise.reject(unavailable(`model instance '${this.name}' is closed`));
    const id = this.#nextId++;
    const transfer: ArrayBuffer[] = [];
    let message: RunMessage;
    try {
      const wire: WireTensor[] = [];
      for (const [name, tensor] of inputs) wire.push(toWire(name, tensor, transfer));
      message = {
        type: "run",
        instanceKey: this.#key,
        id,
        inputs: wire,
        outputNames,
        postedAt: performance.timeOrigin + performance.now(),
      };
    } catch (error) {
      return Promise.reject(asServerError(error));
    }
    const result = new Promise<ExecutionResult>((resolve, reject) => {
      this.#pending.set(id, { resolve, reject });
    });
    this.#updateReference();
    if (this.#ready) this.#send(message, transfer);
    else this.#sendWhenLoaded(message, transfer);
    return result;
  }

  /**
   * Unloads the model once the run its worker is executing (if any) returns (the worker
   * ends with its last instance); runs not yet answered fail with UNAVAILABLE, and so do
   * runs asked for later.
   */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    this.#failPending(unavailable(`model instance '${this.name}' is closing`));
    await this.#ending;
    const link = this.#link;
    if (link !== undefined) await this.#unload(link);
    this.#host.placed.delete(this.#key);
  }

  /** Unloads the model from `link`'s worker; a closed executor's load, if under way, fails. */
  async #unload(link: HostLink): Promise<void> {
    await link.release();
    if (link !== this.#link) return;
    this.#link = undefined;
    this.#ready = false;
    this.#loading?.reject(unavailable(`model instance '${this.name}' is closing`));
    this.#loading = undefined;
  }

  #send(message: RunMessage, transfer: ArrayBuffer[]): void {
    try {
      this.#link!.post(message, transfer);
    } catch (error) {
      // e.g. a buffer that cannot be transferred (WebAssembly memory)
      this.#settle(message.id)?.reject(asServerError(error));
    }
  }

  /** Sends a run once the model is loaded, starting a worker when none is (never started, or a restart failed). */
  #sendWhenLoaded(message: RunMessage, transfer: ArrayBuffer[]): void {
    const loading = this.#loading?.promise ?? this.start();
    loading.then(
      () => {
        // The run may have failed meanwhile (the worker died, the executor closed).
        if (this.#pending.has(message.id) && this.#ready) this.#send(message, transfer);
      },
      (error: ServerError) => this.#settle(message.id)?.reject(error),
    );
  }

  #onMessage(message: FromWorkerMessage): void {
    switch (message.type) {
      case "result":
        this.#settle(message.id)?.resolve(this.#result(message));
        return;
      case "error":
        if (message.id === "load")
          this.#loadFailed(new ServerError(message.code, this.#loadError(message.message)));
        else this.#settle(message.id)?.reject(new ServerError(message.code, message.message));
        return;
      case "loaded": {
        const loading = this.#loading;
        this.#loading = undefined;
        this.#ready = true;
        this.#io = message.io;
        this.#sharesSession = message.sharesSession;
        this.#updateReference();
        loading?.resolve(message.io);
        return;
      }
    }
  }

  #result(message: ResultMessage): ExecutionResult {
    const outputs = new Map<string, Tensor>();
    for (const output of message.outputs) outputs.set(output.name, fromWire(output));
    return {
      outputs,
      timings: {
        waitNs: message.waitNs,
        inputNs: message.inputNs,
        inferNs: message.inferNs,
        outputNs: message.outputNs,
      },
    };
  }

  #loadError(runtimeMessage: string): string {
    return `failed to load model instance '${this.name}' from '${this.#options.load.modelPath}': ${runtimeMessage}`;
  }

  #loadFailed(error: ServerError): void {
    const loading = this.#loading;
    this.#loading = undefined;
    // Let the worker go (it ends if no other instance is on it); a later run tries again.
    const link = this.#link;
    this.#link = undefined;
    if (link !== undefined) this.#ending = link.release();
    loading?.reject(error);
  }

  #onExit(link: HostLink, code: number, lastError: Error | undefined): void {
    if (link !== this.#link) return;
    this.#link = undefined;
    const wasReady = this.#ready;
    this.#ready = false;
    if (this.#closed) {
      this.#loading?.reject(unavailable(`model instance '${this.name}' is closing`));
      this.#loading = undefined;
      return;
    }
    const reason = lastError?.message ?? `exit code ${code}`;
    const error = internal(`model instance '${this.name}' stopped unexpectedly (${reason})`, lastError);
    this.#logger.error(
      { reason, failedRuns: this.#pending.size },
      "model instance worker stopped; restarting it",
    );
    const loading = this.#loading;
    this.#loading = undefined;
    loading?.reject(error);
    this.#failPending(error);
    // Restart only a worker that had loaded: one that dies while loading would die again.
    if (wasReady) {
      this.start().then(
        () => this.#logger.info("model instance worker restarted"),
        (restartError: ServerError) =>
          this.#logger.error({ err: restartError }, "model instance worker could not be restarted"),
      );
    }
  }

  #settle(id: number): PendingRun | undefined {
    const pending = this.#pending.get(id);
    if (pending === undefined) return undefined;
    this.#pending.delete(id);
    this.#updateReference();
    return pending;
  }

  #failPending(error: ServerError): void {
    const runs = [...this.#pending.values()];
    this.#pending.clear();
    this.#updateReference();
    for (const run of runs) run.reject(error);
  }

  /** Busy (loading, or runs under way) keeps the worker, and so the process, alive. */
  #updateReference(): void {
    this.#link?.setBusy(this.#pending.size > 0 || this.#loading !== undefined);
  }
}
