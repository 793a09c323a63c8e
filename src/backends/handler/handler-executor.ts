import type { Worker } from "node:worker_threads";
import { asServerError, internal, ServerError, unavailable } from "../../core/errors.ts";
import type {
  EndedSequence,
  ExecutionOutcome,
  ExecutionRequest,
  ExecutionResult,
  ExecutorTimings,
  RequestExecutor,
  ResponseSink,
} from "../../core/executor.ts";
import type { InferRequest, InferResponse, SequenceId } from "../../core/infer.ts";
import type { ModelIo } from "../../core/model-io.ts";
import { readSequenceControl } from "../../core/sequence/sequence-parameters.ts";
import { STATE_BUDGET_RETRY_AFTER_SECONDS } from "../../core/sequence/state-budget.ts";
import type { Tensor } from "../../core/tensor.ts";
import { timerDelay } from "../../core/timer-delay.ts";
import type { Logger } from "../../observability/logger.ts";
import { spawnWorker } from "../worker/spawn-worker.ts";
import { fromWire, toWire, type WireTensor } from "../worker/wire-tensor.ts";
import { handlerEndReason } from "./end-reasons.ts";
import type {
  CallMessage,
  CallResultMessage,
  CloseSequenceMessage,
  DoneMessage,
  FromHandlerMessage,
  HandlerLoadMessage,
  LingeringMessage,
  ResponseMessage,
  WireError,
  WireRequest,
} from "./handler-messages.ts";
import { requestNamed } from "./request-name.ts";
import { stateFromWire, stateToWire } from "./state-wire.ts";

// One handler instance: a worker thread running the user's module. It sends batches of
// requests, relays decoupled responses with flow control (the worker sends more only as
// the client takes them), runs the worker's calls to other models through the registry,
// and tells the worker which of its sequences ended and why.
//
// Isolation: a request that gets no answer within `timeoutMs` is stopped (the handler's
// signal aborts) and fails; a worker that does not even give the request back within as
// long again is stuck, and is terminated. A step of a sequence answered in its code's
// place while that code goes on holds its sequence's next step and end in the worker
// (handler-worker.ts) for as long again at most (#onLingering). A worker that dies is
// replaced: its requests fail, and `onReplaced` listeners (the sequence batcher) end the
// sequences it held.
// Unlike ONNX Runtime's workers, a handler worker may be terminated: it runs no native
// inference code of its own (it calls models through the main thread).

/** What a handler may call: the server's models. */
export interface ModelCalls {
  infer(model: string, version: string | undefined, request: InferRequest): Promise<InferResponse>;
  /** Ends a live sequence of `model` as a close without a request; false when it is not live. */
  closeSequence(model: string, id: SequenceId): boolean | Promise<boolean>;
}

export interface HandlerExecutorOptions {
  readonly name: string;
  readonly entry: URL;
  readonly load: HandlerLoadMessage;
  readonly logger: Logger;
  readonly calls: ModelCalls;
  /** A request not answered within this long fails (the clock restarts with each decoupled response). */
  readonly timeoutMs: number;
  /** A call to another model not answered within this long fails. */
  readonly callTimeoutMs: number;
  /** Loading the handler (its module and initialize()) not done within this long fails the load. */
  readonly initializeTimeoutMs: number;
  /** The worker's JavaScript heap limit (its old generation), in MB. */
  readonly maxHeapMb: number;
  /** Called once the instance has closed (its worker ended, or never started). */
  readonly onClosed?: () => void;
}

interface Running {
  readonly index: number;
  readonly id: string;
  readonly settle: (index: number, outcome: ExecutionOutcome) => void;
  readonly sink: ResponseSink | undefined;
  readonly signal: AbortSignal | undefined;
  onAbort: (() => void) | undefined;
  timer: NodeJS.Timeout | undefined;
  /** Responses sent and not yet taken by the client, and their bytes. */
  unacked: number;
  unackedBytes: number;
  /** When it first timed out (the worker was told to stop it); undefined while it has not. */
  timedOutAtMs?: number;
  /** Waiting in the worker behind its sequence's previous step: its clock does not run. */
  held?: boolean;
}

/** A step answered in its code's place while that code still runs (LingeringMessage). */
interface Lingering {
  /** Until when it may hold its sequence (epoch ms). */
  readonly deadlineMs: number;
  readonly request: string;
  readonly sequence: string;
  waitingFor: "execute" | "completion";
}

interface Batch {
  readonly resolve: (timings: ExecutorTimings) => void;
  readonly reject: (error: ServerError) => void;
}

const NO_TIMINGS: ExecutorTimings = { inputNs: 0, inferNs: 0, outputNs: 0 };

/** A request in a message: by its id, or "a request" when its client gave none. */
/**
 * Keys the server's log line has already (pino's own, and the logger's bindings): a
 * handler's field of the same name would be a second key in the line, which log stores
 * refuse, and a parser keeping the last would take the handler's `level` or `time`.
 */
const LINE_KEYS: ReadonlySet<string> = new Set([
  "level",
  "time",
  "pid",
  "hostname",
  "name",
  "msg",
  "model",
  "instance",
  "handler",
]);

/** A handler's fields for its log line: one of the line's own keys is kept as `handler_<key>`. */
function handlerLogFields(fields: Readonly<Record<string, unknown>> | undefined): Record<string, unknown> {
  // No prototype: a field named "__proto__" is a field like any other.
  const line: Record<string, unknown> = Object.create(null);
  for (const [key, value] of Object.entries(fields ?? {}))
    line[LINE_KEYS.has(key) ? `handler_${key}` : key] = value;
  line.handler = true;
  return line;
}

export class HandlerExecutor implements RequestExecutor {
  readonly name: string;
  readonly #options: HandlerExecutorOptions;
  readonly #logger: Logger;
  readonly #running = new Map<number, Running>();
  readonly #batches = new Map<number, Batch>();
  readonly #replaced: ((why: string) => void)[] = [];
  /** The worker's calls to other models under way, cancelled when it stops. */
  /** The calls in flight to other models, by the worker's call id. */
  readonly #calls = new Map<number, AbortController>();
  #worker: Worker | undefined;
  #loading: { resolve: (io: ModelIo | undefined) => void; reject: (error: ServerError) => void } | undefined;
  #ready: Promise<ModelIo | undefined> | undefined;
  #loaded = false;
  #closed = false;
  #nextRid = 1;
  #nextBatch = 1;
  #lastError: Error | undefined;
  #stuckTimer: NodeJS.Timeout | undefined;
  /** Steps whose code still runs after they were answered in its place, by rid. */
  readonly #lingering = new Map<number, Lingering>();
  #lingerTimer: NodeJS.Timeout | undefined;

  constructor(options: HandlerExecutorOptions) {
    this.name = options.name;
    this.#options = options;
    this.#logger = options.logger.child({ instance: options.name });
  }

  /** Starts the worker and loads the handler; resolves with what the handler's metadata declares. */
  start(): Promise<ModelIo | undefined> {
    if (this.#closed) return Promise.reject(unavailable(`model instance '${this.name}' is closed`));
    if (this.#ready !== undefined) return this.#ready;
    this.#ready = new Promise((resolve, reject) => {
      this.#loading = { resolve, reject };
    });
    this.#lastError = undefined;
    // A heap limit of its own: a worker past it ends alone (ERR_WORKER_OUT_OF_MEMORY) and
    // is replaced; one without ends the process, every model's sequences with it.
    const worker = spawnWorker(this.#options.entry, {
      resourceLimits: { maxOldGenerationSizeMb: this.#options.maxHeapMb },
    });
    this.#worker = worker;
    worker.on("message", (message: FromHandlerMessage) => this.#onMessage(worker, message));
    worker.on("error", (error) => {
      if (worker === this.#worker) this.#lastError = error;
    });
    worker.on("exit", (code) => this.#onExit(worker, code));
    worker.postMessage(this.#options.load);
    // A handler whose initialize() never returns would hold its model in LOADING for
    // ever: past the limit its load fails and its worker ends.
    const limit = this.#options.initializeTimeoutMs;
    const timer = setTimeout(() => {
      if (worker !== this.#worker || this.#loaded) return;
      this.#failLoad(
        worker,
        internal(
          `model instance '${this.name}' did not finish loading its handler (its module and initialize()) within ${limit} ms (its handler_initialize_timeout_ms)`,
        ),
      );
    }, limit);
    // Settled by the load, its failure, or the worker's exit (#onExit).
    const stop = (): void => clearTimeout(timer);
    this.#ready.then(stop, stop);
    return this.#ready;
  }

  /** Fails the load under way on `worker`, and ends it: not a crash to report or restart from. */
  #failLoad(worker: Worker, error: ServerError): void {
    const loading = this.#loading;
    this.#loading = undefined;
    this.#ready = undefined;
    this.#worker = undefined;
    void worker.terminate();
    loading?.reject(error);
  }

  run(): Promise<ExecutionResult> {
    return Promise.reject(
      new ServerError("UNSUPPORTED", `model instance '${this.name}' runs requests, not tensor batches`),
    );
  }

  onReplaced(listener: (why: string) => void): void {
    this.#replaced.push(listener);
  }

  async execute(
    requests: readonly ExecutionRequest[],
    settle: (index: number, outcome: ExecutionOutcome) => void,
  ): Promise<ExecutorTimings> {
    if (this.#closed) throw unavailable(`model instance '${this.name}' is closed`);
    await this.start();
    const worker = this.#worker;
    if (worker === undefined) throw unavailable(`model instance '${this.name}' is not running`);
    const batch = this.#nextBatch++;
    const transfer: ArrayBuffer[] = [];
    const wire: WireRequest[] = [];
    let decoupled = false;
    requests.forEach((request, index) => {
      const rid = this.#nextRid++;
      const inputs: WireTensor[] = [];
      for (const [name, tensor] of request.inputs) inputs.push(toWire(name, tensor, transfer));
      const sequence = request.sequence;
      wire.push({
        rid,
        id: request.request.id,
        inputs,
        outputNames: request.outputNames,
        parameters: request.request.parameters,
        sequence:
          sequence === undefined ? undefined : { ...sequence, state: stateToWire(sequence.state, transfer) },
      });
      decoupled ||= request.responses !== undefined;
      this.#track(rid, index, request, settle);
    });
    const timings = new Promise<ExecutorTimings>((resolve, reject) =>
      this.#batches.set(batch, { resolve, reject }),
    );
    this.#updateReference();
    worker.postMessage({ type: "execute", batch, decoupled, requests: wire }, transfer);
    return timings;
  }

  sequenceEnded(ended: EndedSequence): void {
    const reason = handlerEndReason(ended.reason);
    // The instance that knew a sequence ended with "instance_failed" is gone: nobody to tell.
    const worker = this.#worker;
    if (reason === undefined || worker === undefined || !this.#loaded) return;
    const transfer: ArrayBuffer[] = [];
    worker.postMessage(
      { type: "ended", id: ended.id, reason, state: stateToWire(ended.state, transfer) },
      transfer,
    );
  }

  /** Calls the handler's finalize() and ends the worker; requests not answered fail. */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    const closing = unavailable(`model instance '${this.name}' is closing`);
    this.#failAll(closing);
    // Requests waiting for a load (a start, or a restart after a crash) fail too.
    this.#loading?.reject(closing);
    this.#loading = undefined;
    const worker = this.#worker;
    try {
      if (worker === undefined) return;
      const exited = new Promise<void>((resolve) => worker.once("exit", () => resolve()));
      worker.ref();
      worker.postMessage({ type: "close" });
      // finalize() gets as long as a request would; a worker that hangs in it is ended.
      const timer = setTimeout(() => void worker.terminate(), timerDelay(this.#options.timeoutMs));
      await exited;
      clearTimeout(timer);
    } finally {
      this.#options.onClosed?.();
    }
  }

  // ---- requests in flight ----

  #track(
    rid: number,
    index: number,
    request: ExecutionRequest,
    settle: (index: number, outcome: ExecutionOutcome) => void,
  ): void {
    const running: Running = {
      index,
      id: request.request.id,
      settle,
      sink: request.responses,
      signal: request.request.signal,
      onAbort: undefined,
      timer: undefined,
      unacked: 0,
      unackedBytes: 0,
    };
    this.#running.set(rid, running);
    running.sink?.onConsumed((bytes) => {
      // A response read after its request is done (its last, say) starts no clock.
      if (this.#running.get(rid) !== running) return;
      running.unacked--;
      running.unackedBytes -= bytes;
      this.#worker?.postMessage({ type: "credit", rid, responses: 1, bytes });
      this.#arm(rid, running);
    });
    const signal = running.signal;
    if (signal !== undefined) {
      running.onAbort = () => this.#worker?.postMessage({ type: "cancel", rid, why: "client" });
      if (signal.aborted) running.onAbort();
      else signal.addEventListener("abort", running.onAbort, { once: true });
    }
    this.#arm(rid, running);
  }

  /** The request's clock: runs while the handler owes an answer, not while the client is slow to read. */
  #arm(rid: number, running: Running): void {
    if (running.timer !== undefined) clearTimeout(running.timer);
    running.timer = undefined;
    if (running.held === true) return;
    const { maxUnackedResponses, maxUnackedBytes } = this.#options.load.limits;
    if (running.unacked >= maxUnackedResponses || running.unackedBytes >= maxUnackedBytes) return;
    running.timer = setTimeout(() => this.#timedOut(rid, running), timerDelay(this.#options.timeoutMs));
  }

  #timedOut(rid: number, running: Running): void {
    running.timer = undefined;
    running.timedOutAtMs ??= Date.now();
    this.#worker?.postMessage({ type: "cancel", rid, why: "timeout" });
    this.#checkStuck();
  }

  /**
   * A worker that has not given back a request a whole timeout after it was told to stop
   * it is stuck (a loop that never yields), and is ended. One check serves every request
   * that timed out: when it finds none stuck yet, it looks again when the oldest could be.
   */
  #checkStuck(): void {
    if (this.#stuckTimer !== undefined) return;
    let oldest: [rid: number, running: Running] | undefined;
    for (const entry of this.#running) {
      const at = entry[1].timedOutAtMs;
      if (at !== undefined && (oldest === undefined || at < oldest[1].timedOutAtMs!)) oldest = entry;
    }
    if (oldest === undefined) return;
    const [rid, running] = oldest;
    const wait = Math.max(0, running.timedOutAtMs! + this.#options.timeoutMs - Date.now());
    this.#stuckTimer = setTimeout(() => {
      this.#stuckTimer = undefined;
      const worker = this.#worker;
      if (worker === undefined) return;
      if (this.#running.get(rid) === running) {
        this.#lastError = withoutStack(
          `it did not give back ${requestNamed(running.id)} within ${2 * this.#options.timeoutMs} ms`,
        );
        void worker.terminate();
        return;
      }
      this.#checkStuck();
    }, timerDelay(wait));
  }

  /**
   * A step answered in its code's place (timed out, cancelled) whose code goes on holds its
   * sequence's next step and end (the worker keeps them until the code is through, and
   * tells of it once something waits), until its deadline: past it, an execute() that has
   * still not returned is taken as
   * never returning and its worker is ended (as a stuck one: its sequences end with
   * instance_failed), since a step still running must not be run over. A decoupled request
   * whose execute() has returned but which its code never completed is let go instead, with
   * a warning: its code may have stopped without saying so, and nothing else would tell.
   */
  #onLingering(message: LingeringMessage): void {
    const known = this.#lingering.get(message.rid);
    if (known !== undefined) known.waitingFor = message.waitingFor;
    else {
      // Its code keeps the time a step may take (twice handler_timeout_ms from its start, as
      // a stuck worker's), and at least handler_timeout_ms more from when something waits:
      // a client that gives up early does not shorten it.
      const timeoutMs = this.#options.timeoutMs;
      this.#lingering.set(message.rid, {
        deadlineMs: Math.max(Date.now(), message.startedAtMs + timeoutMs) + timeoutMs,
        request: message.request,
        sequence: message.sequence,
        waitingFor: message.waitingFor,
      });
    }
    this.#checkLingering();
  }

  #checkLingering(): void {
    if (this.#lingerTimer !== undefined) return;
    let first: number | undefined;
    for (const lingering of this.#lingering.values())
      if (first === undefined || lingering.deadlineMs < first) first = lingering.deadlineMs;
    if (first === undefined) return;
    const limit = this.#options.timeoutMs;
    this.#lingerTimer = setTimeout(
      () => {
        this.#lingerTimer = undefined;
        const worker = this.#worker;
        if (worker === undefined) return;
        const model = this.#options.load.modelName;
        for (const [rid, lingering] of this.#lingering) {
          if (Date.now() < lingering.deadlineMs) continue;
          const what = `${lingering.request} of sequence ${lingering.sequence}`;
          if (lingering.waitingFor === "execute") {
            const why = `its execute() did not return within ${limit} ms after ${what} was answered in its place (timed out or cancelled)`;
            this.#logger.error(
              { request: lingering.request, sequence: lingering.sequence },
              `the handler code of model '${model}' never returned: ${why}; ending the worker, whose sequences end`,
            );
            this.#lastError = withoutStack(why);
            void worker.terminate();
            return;
          }
          this.#lingering.delete(rid);
          this.#logger.warn(
            { request: lingering.request, sequence: lingering.sequence },
            `the handler code of model '${model}' did not complete ${what} within ${limit} ms after it was answered in its place (timed out or cancelled): the sequence goes on without waiting longer (a decoupled handler calls complete() once it stops working on a cancelled request)`,
          );
          worker.postMessage({ type: "release", rid });
        }
        this.#checkLingering();
      },
      timerDelay(Math.max(0, first - Date.now())),
    );
  }

  #response(message: ResponseMessage): void {
    const running = this.#running.get(message.rid);
    if (running?.sink === undefined) return;
    running.unacked++;
    running.unackedBytes += message.bytes;
    this.#arm(message.rid, running);
    running.sink.push(
      { outputs: tensorsOf(message.outputs), parameters: message.parameters, final: message.final },
      message.bytes,
    );
  }

  #done(message: DoneMessage): void {
    const running = this.#untrack(message.rid);
    if (running === undefined) return;
    const state = stateFromWire(message.state);
    const timings = { inputNs: message.inputNs, inferNs: message.inferNs, outputNs: message.outputNs };
    let outcome: ExecutionOutcome;
    // A request that timed out but that the handler finished before it heard so is
    // answered: its step was applied (its state is the new one), so a timeout error would
    // make a client that retries apply it twice.
    if (running.timedOutAtMs !== undefined && message.error !== undefined) {
      outcome = { ok: false, error: this.#timeoutError(running), state, timings };
    } else if (message.error !== undefined) {
      outcome = {
        ok: false,
        error: new ServerError(message.error.code, message.error.message, {
          ...(message.error.reason === undefined ? {} : { reason: message.error.reason }),
          // The worker's budget refusal is the core's (stateBudgetExceeded): retry later.
          ...(message.error.reason === "state_budget"
            ? { retryAfterSeconds: STATE_BUDGET_RETRY_AFTER_SECONDS }
            : {}),
        }),
        state,
        timings,
      };
    } else {
      outcome = {
        ok: true,
        outputs: tensorsOf(message.outputs),
        parameters: message.parameters,
        state,
        timings,
      };
    }
    running.settle(running.index, outcome);
  }

  #timeoutError(running: Running): ServerError {
    return unavailable(
      `model '${this.#options.load.modelName}' (instance '${this.name}') did not answer ` +
        `${requestNamed(running.id)} within ${this.#options.timeoutMs} ms (its handler_timeout_ms)`,
    );
  }

  #untrack(rid: number): Running | undefined {
    const running = this.#running.get(rid);
    if (running === undefined) return undefined;
    this.#running.delete(rid);
    if (running.timer !== undefined) clearTimeout(running.timer);
    if (running.onAbort !== undefined) running.signal?.removeEventListener("abort", running.onAbort);
    if (this.#running.size === 0 && this.#stuckTimer !== undefined) {
      clearTimeout(this.#stuckTimer);
      this.#stuckTimer = undefined;
    }
    this.#updateReference();
    return running;
  }

  #failAll(error: ServerError): void {
    for (const rid of [...this.#running.keys()]) {
      const running = this.#untrack(rid)!;
      const failure = running.timedOutAtMs !== undefined ? this.#timeoutError(running) : error;
      running.settle(running.index, { ok: false, error: failure, state: undefined, timings: NO_TIMINGS });
    }
    const batches = [...this.#batches.values()];
    this.#batches.clear();
    for (const batch of batches) batch.reject(error);
  }

  // ---- calls to other models ----

  #call(worker: Worker, message: CallMessage): void {
    // Call ids count from 1 in each worker: an answer for a worker that has since been
    // replaced would reach another call of the new one. It goes nowhere instead.
    const answer = (result: CallResultMessage["result"], transfer?: ArrayBuffer[]): void => {
      if (worker === this.#worker)
        worker.postMessage({ type: "call-result", cid: message.cid, result }, transfer ?? []);
    };
    const timeoutMs = this.#options.callTimeoutMs;
    // One timer both fails the call and cancels its request: with a timer of its own the
    // request's cancellation could come first, and the call fail as cancelled instead.
    const cancel = new AbortController();
    let request: InferRequest;
    try {
      const inputs = new Map<string, Tensor>();
      for (const input of message.inputs) inputs.set(input.name, fromWire(input));
      request = {
        id: message.id,
        inputs,
        outputs: message.outputs,
        parameters: message.parameters,
        sequence: readSequenceControl(message.parameters),
        signal: cancel.signal,
      };
    } catch (error) {
      answer({ ok: false, error: wireError(error) });
      return;
    }
    this.#calls.set(message.cid, cancel);
    let timer: NodeJS.Timeout | undefined;
    const deadline = new Promise<never>((_, reject) => {
      timer = setTimeout(() => {
        const caller = this.#options.load.modelName;
        // A call back into the caller's own model waits for an instance, maybe the one
        // running this request: said, since nothing else would tell.
        const own =
          message.model === caller
            ? `; a call to the caller's own model needs an instance the calling request is not holding`
            : "";
        reject(
          unavailable(
            `the call from model '${caller}' to model '${message.model}' got no answer within ${timeoutMs} ms (handler_call_timeout_ms)${own}`,
          ),
        );
        cancel.abort();
      }, timerDelay(timeoutMs));
    });
    const settled = (): void => {
      clearTimeout(timer);
      if (this.#calls.get(message.cid) === cancel) this.#calls.delete(message.cid);
    };
    Promise.race([this.#options.calls.infer(message.model, message.version, request), deadline]).then(
      (response) => {
        settled();
        const transfer: ArrayBuffer[] = [];
        let outputs: WireTensor[];
        try {
          outputs = response.outputs.map((o) => toWire(o.name, o, transfer));
        } catch (error) {
          // An answer that cannot be posted still answers the call.
          answer({ ok: false, error: wireError(error) });
          return;
        }
        answer(
          {
            ok: true,
            modelName: response.modelName,
            modelVersion: response.modelVersion,
            id: response.id,
            outputs,
            parameters: response.parameters,
          },
          transfer,
        );
      },
      (error: unknown) => {
        settled();
        answer({ ok: false, error: wireError(error) });
      },
    );
  }

  #closeSequence(worker: Worker, message: CloseSequenceMessage): void {
    const reply = (result: CallResultMessage["result"]): void => {
      if (worker === this.#worker) worker.postMessage({ type: "call-result", cid: message.cid, result });
    };
    // With a shared tier the close may have to reach the sequence through it.
    new Promise<boolean>((resolve) =>
      resolve(this.#options.calls.closeSequence(message.model, message.id)),
    ).then(
      (closed) => reply({ ok: true, closed }),
      (error: unknown) => reply({ ok: false, error: wireError(error) }),
    );
  }

  // ---- the worker's life ----

  #onMessage(worker: Worker, message: FromHandlerMessage): void {
    if (worker !== this.#worker) return;
    switch (message.type) {
      case "loaded":
        this.#loaded = true;
        this.#loading?.resolve(message.io);
        this.#loading = undefined;
        this.#updateReference();
        return;
      case "load-failed": {
        this.#logger.error({ stack: message.stack }, `handler failed to load: ${message.message}`);
        this.#failLoad(
          worker,
          internal(
            `failed to load model instance '${this.name}' from '${this.#options.load.modelPath}': ${message.message}`,
          ),
        );
        return;
      }
      case "response":
        this.#response(message);
        return;
      case "done":
        this.#done(message);
        return;
      case "executed": {
        const batch = this.#batches.get(message.batch);
        this.#batches.delete(message.batch);
        batch?.resolve({ inputNs: message.inputNs, inferNs: message.inferNs, outputNs: message.outputNs });
        this.#updateReference();
        return;
      }
      case "call":
        this.#call(worker, message);
        return;
      case "call-cancel":
        // The handler has given up on it (and answered itself): the request stops where it can.
        if (worker === this.#worker) this.#calls.get(message.cid)?.abort();
        return;
      case "close-sequence":
        this.#closeSequence(worker, message);
        return;
      case "log": {
        this.#logger[message.level](handlerLogFields(message.fields), message.message);
        return;
      }
      case "lingering":
        this.#onLingering(message);
        return;
      case "through":
        this.#lingering.delete(message.rid);
        return;
      case "held": {
        const running = this.#running.get(message.rid);
        if (running === undefined) return;
        running.held = message.held;
        this.#arm(message.rid, running);
        return;
      }
      case "fault": {
        if (message.fatal) {
          // The worker's own code failed, and the worker ends: #onExit logs it, stack and all.
          this.#lastError = Object.assign(new Error(message.message), { stack: message.stack });
          return;
        }
        this.#logger.error(
          { kind: message.kind.replace(" ", "_"), stack: message.stack },
          `an ${message.kind} in the handler code of model '${this.#options.load.modelName}': ${message.message}; the instance goes on`,
        );
        return;
      }
    }
  }

  #onExit(worker: Worker, code: number): void {
    if (worker !== this.#worker) return;
    this.#worker = undefined;
    this.#ready = undefined;
    const wasLoaded = this.#loaded;
    this.#loaded = false;
    if (this.#stuckTimer !== undefined) clearTimeout(this.#stuckTimer);
    this.#stuckTimer = undefined;
    if (this.#lingerTimer !== undefined) clearTimeout(this.#lingerTimer);
    this.#lingerTimer = undefined;
    this.#lingering.clear();
    // Its calls to other models answer nobody now: they stop.
    for (const call of this.#calls.values()) call.abort();
    this.#calls.clear();
    if (this.#closed) {
      this.#loading?.reject(unavailable(`model instance '${this.name}' is closed`));
      this.#loading = undefined;
      return;
    }
    const why = this.#lastError?.message ?? `exit code ${code}`;
    const error = internal(`model instance '${this.name}' stopped unexpectedly (${why})`, this.#lastError);
    this.#logger.error(
      { reason: why, failedRequests: this.#running.size, stack: this.#lastError?.stack },
      "handler worker stopped; restarting it",
    );
    const loading = this.#loading;
    this.#loading = undefined;
    loading?.reject(error);
    this.#failAll(error);
    if (!wasLoaded) return;
    for (const listener of this.#replaced) listener(why);
    this.start().then(
      () => this.#logger.info("handler worker restarted"),
      (restartError: ServerError) =>
        this.#logger.error({ err: restartError }, "handler worker could not be restarted"),
    );
  }

  // An idle worker must not keep the process alive; a loading or busy one must.
  #updateReference(): void {
    const worker = this.#worker;
    if (worker === undefined) return;
    if (this.#running.size > 0 || this.#batches.size > 0 || this.#loading !== undefined) worker.ref();
    else worker.unref();
  }
}

/** A reason of this thread's own for ending a worker: its stack would say nothing of the handler. */
function withoutStack(message: string): Error {
  const error = new Error(message);
  error.stack = undefined;
  return error;
}

/** A failure as it crosses to the worker: its status class and message. */
function wireError(error: unknown): WireError {
  const failure = asServerError(error);
  return { code: failure.code, message: failure.message };
}

function tensorsOf(wire: readonly WireTensor[]): Map<string, Tensor> {
  const tensors = new Map<string, Tensor>();
  for (const tensor of wire) tensors.set(tensor.name, fromWire(tensor));
  return tensors;
}
