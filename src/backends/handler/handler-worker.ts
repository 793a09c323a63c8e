import { parentPort } from "node:worker_threads";
import pLimit from "p-limit";
import { ERROR_CODES, type ErrorCode } from "../../core/errors.ts";
import type { ExecutorTimings } from "../../core/executor.ts";
import { refusedStepOutcome, stateBudgetExceeded } from "../../core/sequence/state-budget.ts";
import { type Tensor, tensorHeldBytes } from "../../core/tensor.ts";
import type {
  CallError,
  CallRequest,
  CallResponse,
  Handler,
  HandlerContext,
  HandlerRequest,
  HandlerResponse,
  SendOptions,
} from "../../handler-api.ts";
import { fromWire, toWire, type WireTensor } from "../worker/wire-tensor.ts";
import { BatchClock } from "./batch-clock.ts";
import { copyableFields, uncopyableText } from "./clone-failure.ts";
import type {
  CallResultMessage,
  CancelMessage,
  CreditMessage,
  DoneMessage,
  EndedMessage,
  ExecuteMessage,
  FromHandlerMessage,
  HandlerLimits,
  HandlerLoadMessage,
  Parameters,
  ToHandlerMessage,
  WireError,
  WireRequest,
  WireSequence,
  WireStateEntry,
} from "./handler-messages.ts";
import { loadHandler } from "./handler-module.ts";
import { HandlerSequenceState } from "./handler-state.ts";
import { checkTensor } from "./handler-tensor.ts";
import { requestNamed } from "./request-name.ts";

// The worker thread of one handler instance: the user's module, loaded once, and the
// requests the main thread sends it. A handler's failure fails only its requests: the
// client gets the message, the log gets the stack. Requests of decoupled models stay open
// after execute() returns, until the handler completes them.

if (parentPort === null) throw new Error("handler-worker.ts runs as a worker thread");
const port = parentPort;

let handler: Handler | undefined;
let context: HandlerContext;
let limits: HandlerLimits;
let limitCalls: ReturnType<typeof pLimit>;
let nextCall = 1;
const calls = new Map<number, (message: CallResultMessage["result"]) => void>();
const open = new Map<number, OpenRequest>();
/** The compute times of a request that never ran (and of a batch left with none to run). */
const NO_TIMINGS: ExecutorTimings = { inputNs: 0, inferNs: 0, outputNs: 0 };

function post(message: FromHandlerMessage, transfer?: ArrayBuffer[]): void {
  port.postMessage(message, transfer);
}

function errorText(error: unknown): string {
  // A thrown plain object with a message (`throw { code, message }`) says it too.
  // Any other object thrown is shown as JSON (not "[object Object]").
  const message =
    error instanceof Error
      ? error.message
      : typeof (error as { message?: unknown } | null)?.message === "string"
        ? (error as { message: string }).message
        : typeof error === "object" && error !== null
          ? describe(error)
          : String(error);
  return message.trim() || "handler failed";
}

function log(
  level: "debug" | "info" | "warn" | "error",
  message: string,
  fields?: Record<string, unknown>,
): void {
  // A log call never fails its request: a message that is not text is made text, fields
  // that cannot be copied are described, and fields that cannot even be read are left out.
  const text = typeof message === "string" ? message : describe(message);
  try {
    post({ type: "log", level, message: text, fields });
  } catch {
    try {
      post({ type: "log", level, message: text, fields: copyableFields(fields) as Record<string, unknown> });
    } catch {
      post({ type: "log", level, message: text, fields: { fields: "[could not be read]" } });
    }
  }
}

/** A log message given as something else than text, as text (never V8's clone refusal). */
function describe(value: unknown): string {
  try {
    return typeof value === "object" && value !== null
      ? JSON.stringify(copyableFields(value))
      : String(value);
  } catch {
    return "[a message that could not be read]";
  }
}

/**
 * A promise the handler may leave un-awaited (`send()`'s): its rejection is still seen by
 * whoever awaits it, but is never "unhandled" (which the log would report as the handler's
 * mistake).
 */
function quietly<T>(promise: Promise<T>): Promise<T> {
  promise.catch(() => {});
  return promise;
}

/**
 * A state the server's --max-state-bytes has no room for (`state_budget`), or larger than
 * the model's sequence_state_max_bytes (`state_bound`): the client's refusal, not the
 * handler's failure (not logged as one); the main thread acts on it by its reason.
 */
class StateRefusal extends Error {
  readonly code = "RESOURCE_EXHAUSTED";
  constructor(
    message: string,
    readonly reason: "state_budget" | "state_bound",
  ) {
    super(message);
  }
}

/** The client's message (never the stack); the stack goes to the log. */
function handlerError(error: unknown, where: string): WireError {
  const stack = error instanceof Error ? error.stack : undefined;
  if (!(error instanceof StateRefusal)) {
    log("error", `handler ${where} failed: ${errorText(error)}`, stack === undefined ? undefined : { stack });
  }
  const code = (error as { code?: unknown } | undefined)?.code;
  return {
    code:
      typeof code === "string" && (ERROR_CODES as readonly string[]).includes(code)
        ? (code as ErrorCode)
        : "INTERNAL",
    message: errorText(error),
    // Only the worker's own refusal carries a reason (a handler's error may have any fields).
    ...(error instanceof StateRefusal ? { reason: error.reason } : {}),
  };
}

function outputsToWire(
  what: string,
  outputs: Readonly<Record<string, Tensor>> | undefined,
  wanted: readonly string[],
  transfer: ArrayBuffer[] | undefined,
): { wire: WireTensor[]; bytes: number } {
  if (typeof outputs !== "object" || outputs === null) throw new Error(`${what} has no 'outputs' object`);
  // An array would give no output by name: every declared output would go missing unsaid.
  if (Array.isArray(outputs))
    throw new Error(`the 'outputs' of ${what} is an array: expected an object of output name: tensor`);
  const wire: WireTensor[] = [];
  let bytes = 0;
  for (const name of wanted) {
    const value = outputs[name];
    if (value === undefined) continue;
    const tensor = checkTensor(`output '${name}'`, value);
    // What the response holds in memory until its client takes it (handler_max_unacked_bytes).
    bytes += tensorHeldBytes(tensor);
    wire.push(toWire(name, tensor, transfer ?? []));
  }
  return { wire, bytes };
}

/** What a value is, for a message that says why it cannot be sent. */
function kindOf(value: unknown): string {
  if (value === null) return "null";
  if (Array.isArray(value)) return "an array";
  const type = typeof value;
  return type === "undefined" ? "undefined" : `${/^[aeiou]/.test(type) ? "an" : "a"} ${type}`;
}

/**
 * A response's parameters as KServe carries them (each a string, number, bigint or
 * boolean), copied into a plain object; anything else is refused here, naming the
 * parameter, rather than by postMessage, whose error would end the worker.
 */
/** `parameters` checked as KServe parameters; `what` names whose they are ("response parameter … of request 'x'"). */
function checkParameters(what: string, parameters: unknown, kind = "response parameter"): Parameters {
  if (parameters === undefined) return {};
  if (typeof parameters !== "object" || parameters === null || Array.isArray(parameters)) {
    throw new Error(`the parameters of ${what} are ${kindOf(parameters)}: expected an object of name: value`);
  }
  const checked: Record<string, Parameters[string]> = {};
  for (const [name, value] of Object.entries(parameters)) {
    const type = typeof value;
    if (type !== "string" && type !== "number" && type !== "bigint" && type !== "boolean") {
      throw new Error(
        `${kind} '${name}' of ${what} is ${kindOf(value)}: parameters are strings, numbers, bigints or booleans`,
      );
    }
    checked[name] = value as Parameters[string];
  }
  return checked;
}

function isResponse(value: unknown): value is HandlerResponse {
  return typeof value === "object" && value !== null && !(value instanceof Error);
}

/** Why an answer could not be posted (postMessage's DataCloneError, say). */
/** `value`, part of what `what` carried, could not be posted (V8's text, which may quote it, left out). */
function notSent(what: string, value: unknown, error: unknown): Error {
  return new Error(`${what} could not be sent: ${uncopyableText(value, error)}`);
}

/** A call given up by its signal: its reason's message when it has one. */
function callCancelled(model: string, signal: AbortSignal): CallError {
  const reason = signal.reason instanceof Error ? `: ${signal.reason.message}` : "";
  return Object.assign(new Error(`the call to '${model}' was cancelled${reason}`), { code: "CANCELLED" });
}

function callError(error: WireError): CallError {
  return Object.assign(new Error(error.message), { code: error.code });
}

// ---- one request ----

/** A request's state as it will be posted, with the buffers to transfer. */
interface KeptState {
  readonly state: WireStateEntry[] | undefined;
  readonly transfer: ArrayBuffer[];
}

class OpenRequest implements HandlerRequest {
  readonly rid: number;
  readonly id: string;
  /** The request as messages name it. */
  readonly named: string;
  readonly inputs: Readonly<Record<string, Tensor>>;
  readonly parameters: Parameters;
  readonly outputs: readonly string[];
  readonly sequence: HandlerRequest["sequence"];
  readonly #state: HandlerSequenceState | undefined;
  /** The server's --max-state-bytes and the room it leaves this state; undefined for an END. */
  readonly #budget: WireSequence["stateBudget"];
  readonly #controller = new AbortController();
  readonly #decoupled: boolean;
  /** The clock of the batch it runs in (none while it has not begun: held, or cancelled before). */
  #clock: BatchClock | undefined;
  #done = false;
  /** Whether the handler's execute() has returned (before that it may read the state). */
  #executeReturned = false;
  /** Handed to execute() (a request held behind its sequence's previous step is not yet), and when. */
  #started = false;
  #startedAtMs = 0;
  /** Its batch's execute() has settled: returned, thrown, or rejected (not merely given up on). */
  #executeSettled = false;
  /** The handler's code said it is done with it: its response, complete(), a final send(). */
  #completedByCode = false;
  /** The executor stopped waiting for the code to complete it (see `through`). */
  #released = false;
  /** What the main thread was last told the request's code is still doing, if anything. */
  #reported: "execute" | "completion" | "through" | undefined;
  #markFinished!: () => void;
  /** Resolves when the request is done (answered, failed, cancelled). */
  readonly finished = new Promise<void>((resolve) => {
    this.#markFinished = resolve;
  });
  #unacked = 0;

  /** Its handler's execute() has returned: the state need not be copied to go back. */
  executeReturned(): void {
    this.#executeReturned = true;
  }

  /** Its batch is built and handed to execute(); `clock` times it. */
  began(clock: BatchClock): void {
    this.#clock = clock;
  }
  #unackedBytes = 0;
  #waiting: { resolve: () => void; reject: (error: Error) => void }[] = [];

  /** Its sequence's id as the gate knows it; undefined for a request without a sequence. */
  readonly sequenceKey: string | undefined;

  constructor(wire: WireRequest, decoupled: boolean) {
    this.rid = wire.rid;
    this.sequenceKey = wire.sequence === undefined ? undefined : sequenceKey(wire.sequence.id);
    this.id = wire.id;
    this.named = requestNamed(wire.id);
    const inputs: Record<string, Tensor> = {};
    for (const input of wire.inputs) inputs[input.name] = fromWire(input);
    this.inputs = inputs;
    this.parameters = wire.parameters;
    this.outputs = wire.outputNames;
    this.#decoupled = decoupled;
    this.#budget = wire.sequence?.stateBudget;
    if (wire.sequence !== undefined) {
      this.#state = new HandlerSequenceState(wire.sequence.state);
      this.sequence = {
        id: wire.sequence.id,
        start: wire.sequence.start,
        end: wire.sequence.end,
        state: this.#state,
      };
    } else this.sequence = undefined;
  }

  get signal(): AbortSignal {
    return this.#controller.signal;
  }

  get done(): boolean {
    return this.#done;
  }

  /** Handed to execute() now. */
  start(): void {
    this.#started = true;
    this.#startedAtMs = Date.now();
  }

  /** Its batch's execute() has settled. */
  executeSettled(): void {
    this.#executeSettled = true;
    this.#checkThrough();
  }

  /** The main thread gives up waiting for a decoupled handler to complete it. */
  release(): void {
    this.#released = true;
    this.#checkThrough();
  }

  #codeCompleted(): void {
    this.#completedByCode = true;
    this.#checkThrough();
  }

  /**
   * Whether the handler's code is through with the request, so that its sequence's next
   * step (or end) may run: it completed the request itself (a response, complete(), a final
   * send()), or, for one cancelled or failed in its place, its batch's execute() has
   * settled and, for a decoupled request (which code may go on with after execute()
   * returned), the code has completed it too, late as that is.
   */
  get through(): boolean {
    if (!this.#done) return false;
    if (!this.#started || this.#completedByCode || this.#released) return true;
    return this.#executeSettled && !this.#decoupled;
  }

  /**
   * A request of a sequence answered in its code's place (timed out, cancelled) while the
   * code still runs holds its sequence's next steps back (see the gate below): once
   * something waits behind it, the main thread is told, so that it can bound how long,
   * and told again when the code is through. Code that goes on with nothing waiting for
   * it holds nothing, and is left to finish.
   */
  #checkThrough(): void {
    if (this.sequenceKey === undefined || !this.#done || this.#reported === "through") return;
    if (this.through) {
      if (this.#reported !== undefined) post({ type: "through", rid: this.rid });
      this.#reported = "through";
      codeThrough(this);
      return;
    }
    if (hasWaiting(this.sequenceKey)) this.reportLingering();
  }

  /** Tells the main thread that this request's code still holds its sequence back, and on what. */
  reportLingering(): void {
    if (!this.#done || this.#reported === "through" || this.through) return;
    const waitingFor = this.#executeSettled ? "completion" : "execute";
    if (this.#reported === waitingFor) return;
    this.#reported = waitingFor;
    post({
      type: "lingering",
      rid: this.rid,
      request: this.named,
      sequence: String(this.sequence!.id),
      waitingFor,
      startedAtMs: this.#startedAtMs,
    });
  }

  send(response: HandlerResponse, options?: SendOptions): Promise<void> {
    return quietly(this.#send(response, options));
  }

  #send(response: HandlerResponse, options?: SendOptions): Promise<void> {
    // A final send() says the code is done with the request, even once it is cancelled.
    if (options?.final === true && this.#decoupled) this.#codeCompleted();
    if (!this.#decoupled) {
      return Promise.reject(new Error("send() is for decoupled models: return the responses from execute()"));
    }
    if (this.#done) {
      // Cancelled: the reason, as the signal and any waiting send() gave it.
      const signal = this.#controller.signal;
      return Promise.reject(signal.aborted ? signal.reason : new Error(`${this.named} is already complete`));
    }
    if (this.signal.aborted) return Promise.reject(this.signal.reason as Error);
    if (this.#unacked >= limits.maxUnackedResponses || this.#unackedBytes >= limits.maxUnackedBytes) {
      // The previous send() has not resolved: the client has not taken enough yet. Sending
      // on regardless would queue without bound, so the request fails instead.
      const error = Object.assign(
        new Error(
          `${this.named} sent a response while ${this.#unacked} earlier ones (${this.#unackedBytes} bytes) were still unread: await send() before sending more`,
        ),
        { code: "RESOURCE_EXHAUSTED" },
      );
      this.fail({ code: "RESOURCE_EXHAUSTED", message: error.message });
      return Promise.reject(error);
    }
    let encoded: { wire: WireTensor[]; bytes: number };
    let parameters: Parameters;
    try {
      if (!isResponse(response)) throw new Error(`send() of ${this.named} was given no response`);
      // Copied, not transferred: the handler may keep what it sent (in its state, say).
      encoded = outputsToWire("the response", response.outputs, this.outputs, undefined);
      parameters = checkParameters(this.named, response.parameters);
    } catch (error) {
      return Promise.reject(error);
    }
    const final = options?.final === true;
    let kept: KeptState | undefined;
    if (final) {
      // Nothing may follow a response flagged final: the state the request leaves is
      // checked before it goes, and a state the model cannot keep fails the request in
      // its place (the response, sent first, told the client the request succeeded).
      const transfer: ArrayBuffer[] = [];
      try {
        kept = { state: this.#keptState(transfer), transfer };
      } catch (error) {
        this.fail(handlerError(error, this.named));
        return Promise.reject(error);
      }
    }
    try {
      post({
        type: "response",
        rid: this.rid,
        outputs: encoded.wire,
        parameters,
        final,
        bytes: encoded.bytes,
      });
    } catch (error) {
      return Promise.reject(notSent(`a response of ${this.named}`, parameters, error));
    }
    this.#unacked++;
    this.#unackedBytes += encoded.bytes;
    if (final) {
      this.#finish(undefined, undefined, kept);
      return Promise.resolve();
    }
    if (this.#unacked < limits.maxUnackedResponses && this.#unackedBytes < limits.maxUnackedBytes) {
      return Promise.resolve();
    }
    // The client has not taken enough of what was sent: wait for it.
    return new Promise((resolve, reject) => this.#waiting.push({ resolve, reject }));
  }

  credit(message: CreditMessage): void {
    this.#unacked -= message.responses;
    this.#unackedBytes -= message.bytes;
    while (
      this.#waiting.length > 0 &&
      this.#unacked < limits.maxUnackedResponses &&
      this.#unackedBytes < limits.maxUnackedBytes
    ) {
      this.#waiting.shift()!.resolve();
    }
  }

  complete(error?: Error): void {
    // Even once it is cancelled: the code says it has stopped working on it.
    this.#completedByCode = true;
    if (this.#done) {
      this.#checkThrough();
      return;
    }
    if (error !== undefined) this.fail(handlerError(error, this.named));
    else this.#finish(undefined, undefined);
  }

  /** A response of a request that is not decoupled: the request is complete with it. */
  answer(response: unknown): void {
    this.#completedByCode = true;
    if (response instanceof Error) {
      this.fail(handlerError(response, this.named));
      return;
    }
    // null, a number…: no response, said as such (not a TypeError from reading it).
    if (!isResponse(response)) {
      this.fail({ code: "INTERNAL", message: `the handler gave no response to ${this.named}` });
      return;
    }
    this.#finish(undefined, response);
  }

  fail(error: WireError): void {
    this.#finish(error, undefined);
  }

  /** Its execute() threw: the code is done with it, and it fails. */
  failedInExecute(error: WireError): void {
    this.#completedByCode = true;
    this.fail(error);
  }

  cancel(message: CancelMessage): void {
    if (this.#done) return;
    const why =
      message.why === "client" ? "the client went away" : "it did not finish within handler_timeout_ms";
    const reason = Object.assign(new Error(`${this.named} cancelled: ${why}`), { code: "CANCELLED" });
    this.#controller.abort(reason);
    for (const waiter of this.#waiting.splice(0)) waiter.reject(reason);
    this.fail({ code: message.why === "client" ? "CANCELLED" : "UNAVAILABLE", message: reason.message });
  }

  /** The sequence's state after the request, ready to post; throws when the model cannot keep it. */
  #keptState(transfer: ArrayBuffer[]): WireStateEntry[] | undefined {
    if (this.#state === undefined) return undefined;
    const kept = this.#state.result(transfer, !this.#executeReturned);
    // An END's state is freed with it: the bound protects nothing there (as the budget's).
    const sequence = this.sequence!;
    if (kept.bytes > limits.maxStateBytes && sequence.end !== true) {
      throw new StateRefusal(
        `the state of sequence ${String(sequence.id)} would hold ${kept.bytes} bytes, more than the model's sequence_state_max_bytes (${limits.maxStateBytes}): ${refusedStepOutcome(sequence.start)}`,
        "state_bound",
      );
    }
    const budget = this.#budget;
    if (budget !== undefined && kept.bytes > budget.roomBytes) {
      throw new StateRefusal(
        stateBudgetExceeded(budget.step, kept.bytes, budget.maxBytes).message,
        "state_budget",
      );
    }
    return kept.entries;
  }

  /** `kept`: the state, already checked (by a final send()). */
  #finish(error: WireError | undefined, response: HandlerResponse | undefined, kept?: KeptState): void {
    if (this.#done) return;
    this.#done = true;
    // What the handler changes after this is nowhere: the log says so, once.
    this.#state?.seal((key, late) =>
      log(
        "warn",
        late === "change"
          ? `${this.named} is complete: a change of its sequence's state after that (state '${key}') is not kept`
          : `${this.named} is complete: its sequence's state went back with it, and state '${key}' read after that is undefined`,
      ),
    );
    this.#markFinished();
    open.delete(this.rid);
    // What was sent stays sent: a send() still waiting for room is done, not failed.
    for (const waiter of this.#waiting.splice(0)) waiter.resolve();
    let transfer: ArrayBuffer[] = kept?.transfer ?? [];
    let outputs: WireTensor[] = [];
    let parameters: Parameters = {};
    let state = kept?.state;
    if (error === undefined) {
      try {
        if (kept === undefined) state = this.#keptState(transfer);
        if (response !== undefined) {
          outputs = outputsToWire("the response", response.outputs, this.outputs, transfer).wire;
          parameters = checkParameters(this.named, response.parameters);
        }
      } catch (failure) {
        error = handlerError(failure, this.named);
        outputs = [];
        parameters = {};
        transfer = [];
      }
    }
    // A failed request leaves the state as it was.
    if (error !== undefined) state = this.#state?.original(transfer, !this.#executeReturned);
    const answer = { type: "done", rid: this.rid, error, outputs, parameters, state } as const;
    const clock = this.#clock;
    if (clock === undefined) this.#post(answer, transfer, NO_TIMINGS);
    else clock.post(() => this.#post(answer, transfer, clock.timings()));
  }

  /** Posts the request's answer, with the compute times it reports (its batch's: batch-clock.ts). */
  #post(
    answer: Omit<DoneMessage, keyof ExecutorTimings>,
    transfer: ArrayBuffer[],
    timings: ExecutorTimings,
  ): void {
    const { parameters } = answer;
    try {
      post({ ...answer, ...timings }, transfer);
    } catch (failure) {
      // postMessage clones before it transfers: nothing of the answer left, the state's
      // buffers are still here. The request fails with the reason, not the worker with it.
      const notPosted = handlerError(
        notSent(`the answer to ${this.named}`, { parameters }, failure),
        this.named,
      );
      const original: ArrayBuffer[] = [];
      post(
        {
          type: "done",
          rid: this.rid,
          error: notPosted,
          outputs: [],
          parameters: {},
          state: this.#state?.original(original, !this.#executeReturned),
          ...timings,
        },
        original,
      );
    }
    this.#checkThrough();
  }
}

// ---- the context a handler is given ----

function makeContext(message: HandlerLoadMessage, directory: string): HandlerContext {
  const waitFor = (cid: number): Promise<CallResultMessage["result"]> =>
    new Promise((resolve) => calls.set(cid, resolve));
  return {
    model: {
      name: message.modelName,
      version: message.version,
      instance: message.instanceName,
      parameters: message.parameters,
      directory,
    },
    log: {
      debug: (m, f) => log("debug", m, f),
      info: (m, f) => log("info", m, f),
      warn: (m, f) => log("warn", m, f),
      error: (m, f) => log("error", m, f),
    },
    infer: (model: string, request: CallRequest): Promise<CallResponse> =>
      limitCalls(async () => {
        const signal = request.signal;
        if (signal?.aborted === true) throw callCancelled(model, signal);
        const cid = nextCall++;
        const inputs: WireTensor[] = [];
        let parameters: Parameters;
        try {
          for (const [name, tensor] of Object.entries(request.inputs ?? {})) {
            // Copied, not transferred: the handler keeps its tensors.
            inputs.push(toWire(name, checkTensor(`input '${name}' of the call to '${model}'`, tensor), []));
          }
          parameters = checkParameters(`the call to '${model}'`, request.parameters, "parameter");
        } catch (error) {
          // A call the handler got wrong fails as any refused call does: with a code.
          throw Object.assign(error as Error, { code: "INVALID_ARG" });
        }
        const result = waitFor(cid);
        try {
          post({
            type: "call",
            cid,
            model,
            version: request.version,
            id: request.id ?? "",
            inputs,
            outputs: request.outputs,
            parameters,
          });
        } catch (error) {
          // Not sent (a field postMessage cannot copy): no answer will come for it.
          calls.delete(cid);
          throw notSent(`the call to '${model}'`, { id: request.id, parameters }, error);
        }
        let answer: CallResultMessage["result"];
        if (signal === undefined) answer = await result;
        else {
          // Given up when the signal is aborted: the answer, if one comes, goes nowhere.
          const onAbort = (): void => {
            if (!calls.delete(cid)) return;
            post({ type: "call-cancel", cid });
            abandon(callCancelled(model, signal));
          };
          let abandon: (error: Error) => void = () => {};
          const abandoned = new Promise<never>((_, reject) => {
            abandon = reject;
          });
          signal.addEventListener("abort", onAbort, { once: true });
          try {
            answer = await Promise.race([result, abandoned]);
          } finally {
            signal.removeEventListener("abort", onAbort);
          }
        }
        if (!answer.ok) throw callError(answer.error);
        if (!("outputs" in answer)) throw new Error("unexpected answer to a call");
        const outputs: Record<string, Tensor> = {};
        for (const output of answer.outputs) outputs[output.name] = fromWire(output);
        return {
          modelName: answer.modelName,
          modelVersion: answer.modelVersion,
          id: answer.id,
          outputs,
          parameters: answer.parameters,
        };
      }),
    closeSequence: async (model: string, id: bigint | string): Promise<boolean> => {
      const cid = nextCall++;
      const result = waitFor(cid);
      post({ type: "close-sequence", cid, model, id });
      const answer = await result;
      if (!answer.ok) throw callError(answer.error);
      return "closed" in answer ? answer.closed : false;
    },
  };
}

// ---- errors nobody caught ----
//
// A promise the handler's code leaves rejected, or an exception from one of its timers or
// listeners, would end the worker, and with it every request and sequence of the instance,
// for one forgotten `await`. The handler's code is not part of the worker's bookkeeping
// (requests, calls, state in transit), which such an error leaves as it was: the error is
// logged, with its stack, and the worker goes on, as it does after an exception from
// execute(). An error of the worker's own code is another matter: its bookkeeping may be
// half done, so the worker ends (and is restarted), the stack going to the log.

/** The message and stack of anything thrown, without trusting it (a getter may throw). */
function faultOf(error: unknown): { message: string; stack: string | undefined } {
  try {
    const stack = error instanceof Error ? error.stack : undefined;
    return { message: errorText(error), stack: typeof stack === "string" ? stack : undefined };
  } catch {
    return { message: "[an error that could not be read]", stack: undefined };
  }
}

/** The worker's own code failed: it says why, and ends (the instance restarts it). */
function workerFailed(error: unknown): never {
  try {
    post({ type: "fault", kind: "uncaught exception", fatal: true, ...faultOf(error) });
  } finally {
    process.exit(1);
  }
}

process.on("unhandledRejection", (reason) => {
  post({ type: "fault", kind: "unhandled rejection", fatal: false, ...faultOf(reason) });
});
process.on("uncaughtException", (error) => {
  post({ type: "fault", kind: "uncaught exception", fatal: false, ...faultOf(error) });
});

// ---- messages ----

async function load(message: HandlerLoadMessage): Promise<void> {
  limits = message.limits;
  limitCalls = pLimit(Math.max(1, limits.maxConcurrentCalls));
  try {
    const loaded = await loadHandler(message.modelPath, message.compiledPath);
    const directory = message.modelPath.replace(/[\\/][^\\/]*$/, "");
    context = makeContext(message, directory);
    await loaded.handler.initialize?.(context);
    handler = loaded.handler;
    post({ type: "loaded", io: loaded.io });
  } catch (error) {
    post({
      type: "load-failed",
      message: errorText(error),
      stack: error instanceof Error ? error.stack : undefined,
    });
  }
}

// ---- the steps of a sequence, one at a time ----
//
// The main thread sends a sequence's next step (or its end) once the previous step is
// answered. A step answered in its code's place (it timed out, its client left) may still
// be running in the handler's code: its next step and its sequenceEnded() wait here until
// that code is through with it (OpenRequest.through), so that the handler never runs two
// steps of one sequence at once, nor ends a sequence under a step still running. The other
// sequences' steps do not wait. How long a step may keep its sequence waiting is the main
// thread's to bound (the "lingering" and "through" messages).

/** A sequence id as a key: a uint64 and a string id of the same digits are two sequences. */
function sequenceKey(id: bigint | string): string {
  return typeof id === "bigint" ? `n${id}` : `s${id}`;
}

/** Per sequence: its requests whose code is not through, and what waits for them. */
const steps = new Map<string, { running: Set<OpenRequest>; waiting: (() => void)[] }>();

function stepsOf(key: string): { running: Set<OpenRequest>; waiting: (() => void)[] } {
  let entry = steps.get(key);
  if (entry === undefined) {
    entry = { running: new Set(), waiting: [] };
    steps.set(key, entry);
  }
  return entry;
}

/** No earlier step of the sequence is running or waiting. */
function free(key: string): boolean {
  const entry = steps.get(key);
  return entry === undefined || (entry.running.size === 0 && entry.waiting.length === 0);
}

/** Whether something waits behind the sequence's steps. */
function hasWaiting(key: string): boolean {
  return (steps.get(key)?.waiting.length ?? 0) > 0;
}

/**
 * `action` waits until every earlier step of the sequence is through; from now on, a step
 * whose code holds it back is reported (the main thread bounds the wait).
 */
function waitBehind(key: string, action: () => void): void {
  const entry = stepsOf(key);
  entry.waiting.push(action);
  for (const request of entry.running) request.reportLingering();
}

/** Runs `action` now, or once every earlier step of the sequence is through. */
function afterSteps(key: string, action: () => void): void {
  if (free(key)) action();
  else waitBehind(key, action);
}

function codeThrough(request: OpenRequest): void {
  const key = request.sequenceKey!;
  const entry = steps.get(key);
  if (entry === undefined || !entry.running.delete(request)) return;
  while (entry.running.size === 0 && entry.waiting.length > 0) entry.waiting.shift()!();
  if (entry.running.size === 0 && entry.waiting.length === 0) steps.delete(key);
}

/** Requests that were answered while their code ran, by rid: the main thread may release them. */
function lingering(rid: number): OpenRequest | undefined {
  for (const entry of steps.values())
    for (const request of entry.running) if (request.rid === rid) return request;
  return undefined;
}

async function execute(message: ExecuteMessage): Promise<void> {
  const start = performance.now();
  const requests = message.requests.map((wire) => new OpenRequest(wire, message.decoupled));
  for (const request of requests) open.set(request.rid, request);
  const now: OpenRequest[] = [];
  for (const request of requests) {
    const key = request.sequenceKey;
    if (key === undefined || free(key)) now.push(request);
    else {
      // Held behind its sequence's previous step: it runs as a batch of its own when that
      // step's code is through (unless it was cancelled meanwhile). Its clock stops meanwhile.
      post({ type: "held", rid: request.rid, held: true });
      waitBehind(key, () => {
        if (request.done) return;
        post({ type: "held", rid: request.rid, held: false });
        runBatch([request], message.decoupled, undefined, performance.now()).catch(workerFailed);
      });
    }
  }
  await runBatch(now, message.decoupled, message.batch, start);
}

/** Runs `requests` through the handler's execute(); `batch` is the main thread's, when it waits for it. */
async function runBatch(
  requests: readonly OpenRequest[],
  decoupled: boolean,
  batch: number | undefined,
  start: number,
): Promise<void> {
  if (requests.length === 0) {
    if (batch !== undefined) post({ type: "executed", batch, ...NO_TIMINGS });
    return;
  }
  const clock = new BatchClock(start);
  for (const request of requests) {
    request.start();
    if (request.sequenceKey !== undefined) stepsOf(request.sequenceKey).running.add(request);
  }
  clock.built();
  for (const request of requests) request.began(clock);
  let result: unknown;
  let failure: WireError | undefined;
  // The handler's own promise, whose settling says its code is out of execute() (a throw
  // before its first await, too).
  const running = (async () => handler!.execute(requests, context))();
  const settled = (): void => {
    for (const request of requests) request.executeSettled();
  };
  running.then(settled, settled);
  try {
    // An execute() that never returns holds the instance only until its requests are all
    // done (answered, timed out, cancelled): then the instance takes other batches.
    result = await Promise.race([running, allDone(requests)]);
  } catch (error) {
    failure = handlerError(error, "execute()");
  }
  // (After GAVE_UP it may still run, but every request is done by then.)
  for (const request of requests) request.executeReturned();
  clock.returned();
  try {
    answer(requests, decoupled, result, failure);
  } finally {
    clock.answered();
  }
  if (batch === undefined) return;
  post({ type: "executed", batch, ...clock.timings() });
}

/** Answers `requests` with what their execute() returned (`result`), or its `failure`. */
function answer(
  requests: readonly OpenRequest[],
  decoupled: boolean,
  result: unknown,
  failure: WireError | undefined,
): void {
  if (failure !== undefined) {
    for (const request of requests) request.failedInExecute(failure);
  } else if (Array.isArray(result)) {
    if (!decoupled && result.length !== requests.length) {
      const error: WireError = {
        code: "INTERNAL",
        message: `the handler's execute() returned ${result.length} responses for ${requests.length} requests`,
      };
      for (const request of requests) request.fail(error);
    } else {
      requests.forEach((request, i) => {
        if (request.done) return;
        const response: unknown = result[i];
        if (decoupled && isResponse(response)) {
          // A response that cannot be sent fails its request (it would wait for its timeout).
          request.send(response, { final: true }).catch((error: Error) => request.complete(error));
        } else request.answer(response);
      });
    }
  } else if (!decoupled && result !== GAVE_UP) {
    const error: WireError = {
      code: "INTERNAL",
      message: "the handler's execute() returned no responses (an array with one per request is expected)",
    };
    for (const request of requests) request.fail(error);
  }
}

const GAVE_UP = Symbol("every request of the batch is done");

function allDone(requests: readonly OpenRequest[]): Promise<typeof GAVE_UP> {
  return Promise.all(requests.map((r) => r.finished)).then(() => GAVE_UP);
}

async function sequenceEnded(message: EndedMessage): Promise<void> {
  if (handler?.sequenceEnded === undefined) return;
  try {
    await handler.sequenceEnded(
      // Nothing is given back after a sequence's end: its tensors need no copy.
      { id: message.id, state: new HandlerSequenceState(message.state, false) },
      message.reason,
      context,
    );
  } catch (error) {
    handlerError(error, `sequenceEnded() of sequence ${String(message.id)}`);
  }
}

async function close(): Promise<void> {
  try {
    await handler?.finalize?.();
  } catch (error) {
    handlerError(error, "finalize()");
  }
  port.close();
}

// Every path of the worker's own code ends here or in workerFailed: what reaches the
// process's handlers above came from the handler's code.
port.on("message", (message: ToHandlerMessage) => {
  try {
    receive(message);
  } catch (error) {
    workerFailed(error);
  }
});

function receive(message: ToHandlerMessage): void {
  switch (message.type) {
    case "load":
      load(message).catch(workerFailed);
      return;
    case "execute":
      execute(message).catch(workerFailed);
      return;
    case "credit":
      open.get(message.rid)?.credit(message);
      return;
    case "cancel":
      open.get(message.rid)?.cancel(message);
      return;
    case "ended":
      // After the sequence's last step, its code included.
      afterSteps(sequenceKey(message.id), () => {
        sequenceEnded(message).catch(workerFailed);
      });
      return;
    case "release":
      lingering(message.rid)?.release();
      return;
    case "call-result": {
      const resolve = calls.get(message.cid);
      calls.delete(message.cid);
      resolve?.(message.result);
      return;
    }
    case "close":
      close().catch(workerFailed);
      return;
  }
}
