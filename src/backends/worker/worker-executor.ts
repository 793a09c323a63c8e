import type { ResourceLimits, Worker } from "node:worker_threads";
import { asServerError, internal, ServerError, unavailable } from "../../core/errors.ts";
import type { ExecutionResult, ModelExecutor } from "../../core/executor.ts";
import type { ModelIo } from "../../core/model-io.ts";
import type { Tensor } from "../../core/tensor.ts";
import type { Logger } from "../../observability/logger.ts";
import type { FromWorkerMessage, LoadMessage, ResultMessage, RunMessage } from "./messages.ts";
import { spawnWorker } from "./spawn-worker.ts";
import { fromWire, toWire, type WireTensor } from "./wire-tensor.ts";

// One model instance hosted in a worker thread. The executor owns the thread's life: it
// starts the worker and loads the model, forwards runs, and when the thread dies (crash,
// out of memory, exit) it fails the runs the thread held and starts a fresh one, so a
// later run finds the model loaded again.
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
  /** Sent first to every worker this executor starts. */
  readonly load: LoadMessage;
  /** Bounds the worker's JS heap; a worker that outgrows it dies and is replaced. */
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

export class WorkerExecutor implements ModelExecutor {
  readonly name: string;
  readonly #options: WorkerExecutorOptions;
  readonly #logger: Logger;
  readonly #pending = new Map<number, PendingRun>();
  #worker: Worker | undefined;
  /** Set while the current worker is loading the model. */
  #loading: Loading | undefined;
  #ready = false;
  /** What the model declares, once loaded. */
  #io: ModelIo | undefined;
  #closed = false;
  #nextId = 1;
  /** Whether the worker currently keeps the process alive (only while it has work). */
  #referenced = true;
  #lastError: Error | undefined;
  /** A worker asked to close after a failed load, for close() to wait for. */
  #ending: Promise<void> | undefined;

  constructor(options: WorkerExecutorOptions) {
    this.name = options.name;
    this.#options = options;
    this.#logger = options.logger.child({ instance: options.name });
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
    this.#lastError = undefined;
    const { entry, resourceLimits, load } = this.#options;
    const worker = spawnWorker(entry, resourceLimits === undefined ? {} : { resourceLimits });
    this.#worker = worker;
    this.#referenced = true;
    worker.on("message", (message: FromWorkerMessage) => this.#onMessage(message));
    worker.on("error", (error) => {
      if (worker === this.#worker) this.#lastError = error;
    });
    worker.on("exit", (code) => this.#onExit(worker, code));
    worker.postMessage(load);
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
   * Ends the worker once the run it is executing (if any) returns; runs not yet answered
   * fail with UNAVAILABLE, and so do runs asked for later.
   */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    this.#failPending(unavailable(`model instance '${this.name}' is closing`));
    await this.#ending;
    const worker = this.#worker;
    if (worker !== undefined) await this.#askToClose(worker);
  }

  #askToClose(worker: Worker): Promise<void> {
    const exited = new Promise<void>((resolve) => worker.once("exit", () => resolve()));
    worker.ref();
    worker.postMessage({ type: "close" });
    return exited;
  }

  #send(message: RunMessage, transfer: ArrayBuffer[]): void {
    try {
      this.#worker!.postMessage(message, transfer);
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
    // A worker without a model is of no use: let it go, and let a later run try again.
    const worker = this.#worker;
    this.#worker = undefined;
    if (worker !== undefined) this.#ending = this.#askToClose(worker);
    loading?.reject(error);
  }

  #onExit(worker: Worker, code: number): void {
    if (worker !== this.#worker) return;
    this.#worker = undefined;
    const wasReady = this.#ready;
    this.#ready = false;
    if (this.#closed) {
      this.#loading?.reject(unavailable(`model instance '${this.name}' is closing`));
      this.#loading = undefined;
      return;
    }
    const reason = this.#lastError?.message ?? `exit code ${code}`;
    const error = internal(`model instance '${this.name}' stopped unexpectedly (${reason})`, this.#lastError);
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

  // An idle worker must not keep the process alive (a server that forgot to close a model
  // still exits); a loading or busy one must, or its answer could be lost.
  #updateReference(): void {
    const worker = this.#worker;
    if (worker === undefined) return;
    const busy = this.#pending.size > 0 || this.#loading !== undefined;
    if (busy === this.#referenced) return;
    this.#referenced = busy;
    if (busy) worker.ref();
    else worker.unref();
  }
}
