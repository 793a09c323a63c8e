import { invalidArg, type ServerError } from "../../core/errors.ts";
import type {
  ModelRegistry,
  SequenceEndReason,
  SequenceLookup,
  ServedModel,
  UnloadedSequenceEnd,
} from "../../core/model.ts";
import { formatExpiry, NEW_SESSION, newSessionId } from "./session-id.ts";

// SageMaker stateful sessions are sequences of the model they were opened on: the
// session id is the sequence id, the state is the sequence's, kept by the core. Opening
// a session opens a sequence with an expiry (the TTL counts from opening; the model's
// idle timeout does not apply, but one opened without a step has a minute for it); closing one ends it as an END would. When a session can
// no longer be used, the core remembers why for a while, and the caller is told which:
// closed, expired, ended for another reason (its model unloaded among them: the
// repository keeps the ends of unloaded versions a while), or never known here.

export interface OpenedSession {
  readonly id: string;
  readonly expiresAtMs: number;
}

export interface FoundSession {
  /** The model the session is (or was) a sequence of. */
  readonly model: ServedModel;
  /**
   * Set when its client closed it: the 400 that says so. The core may still answer a
   * numbered retry of one of its last steps (its CLOSE) from the record of its end.
   */
  readonly closed: ServerError | undefined;
}

const iso = (epochMs: number): string => formatExpiry(epochMs);

/**
 * How long a session's step waits for one of its model's sequence slots when other
 * sessions hold them all; then it is answered, and its session ends (`backlog_timeout`).
 * SageMaker gives a container 60 s to answer an invocation, and the SDKs' read timeout
 * is 60 s too (boto3's, which then sends the step again): the answer must come before,
 * with time left for the step to run once it gets a slot.
 */
export const SESSION_SLOT_WAIT_SECS = 50;

function why(reason: SequenceEndReason): string {
  switch (reason) {
    case "cancelled":
      return "one of its requests was cancelled: its client went away before the answer";
    case "forced":
      return "it was ended through the sequences API, or the request that opened it failed";
    case "shutdown":
      return "the server was shutting down";
    case "timeout":
      return "it was opened without a step and sent none within a minute (or its model's idle timeout, max_sequence_idle_microseconds, if longer), which holds a session's slot until its first step";
    case "unloaded":
      return "its model was unloaded";
    case "backlog_timeout":
      return `it waited ${SESSION_SLOT_WAIT_SECS} s for one of its model's sequence slots, all in use by other sequences (close the sessions no longer in use, or give the model more slots)`;
    default:
      return `reason '${reason}'`;
  }
}

type Found = { readonly model: ServedModel; readonly lookup: Exclude<SequenceLookup, { kind: "unknown" }> };

/** The model where the session is live, else the one where it ended last; undefined when no model knows it. */
function mostTelling(
  lookups: readonly { readonly model: ServedModel; readonly lookup: SequenceLookup | undefined }[],
): Found | undefined {
  let found: Found | undefined;
  for (const { model, lookup } of lookups) {
    if (lookup === undefined || lookup.kind === "unknown") continue;
    if (lookup.kind === "live") return { model, lookup };
    if (found === undefined || (found.lookup.kind === "ended" && lookup.endedAtMs > found.lookup.endedAtMs)) {
      found = { model, lookup };
    }
  }
  return found;
}

export class SageMakerSessions {
  readonly #registry: ModelRegistry;
  readonly #ttlSecs: number;

  constructor(registry: ModelRegistry, ttlSecs: number) {
    this.#registry = registry;
    this.#ttlSecs = ttlSecs;
  }

  /** Opens a session on `model`, owned by `owner` (the caller's API key's name): a sequence that expires `ttlSecs` after now. */
  async open(model: ServedModel, owner?: string): Promise<OpenedSession> {
    const sequences = model.sequences;
    if (sequences === undefined) {
      throw invalidArg(
        `model '${model.name}' keeps no per-session state (it is not served with sequence batching), so it cannot open a session`,
      );
    }
    const corrid = model.config.sequenceBatching?.controlInputs.find((c) => c.kind === "CORRID");
    if (corrid !== undefined && corrid.datatype !== "BYTES") {
      throw invalidArg(
        `model '${model.name}' passes sequence ids to its CORRID control '${corrid.name}' as ${corrid.datatype}, which cannot hold a session id: declare it TYPE_STRING to serve sessions`,
      );
    }
    const id = newSessionId();
    // SageMaker states the expiry in whole seconds: round up, so the session lasts at
    // least the TTL and ends exactly when its Expires says.
    const expiresAtMs = Math.ceil((Date.now() + this.#ttlSecs * 1000) / 1000) * 1000;
    // With a shared state tier, the session exists there (any replica can continue it) before it is answered.
    await sequences.open(id, { expiresAtMs, owner });
    return { id, expiresAtMs };
  }

  /**
   * The model holding live session `id`. With a TargetModel the session must be that
   * model's. Otherwise a 400 that says why the id cannot be used.
   */
  async find(id: string, target: ServedModel | undefined): Promise<ServedModel> {
    const { model, closed } = await this.locate(id, target);
    if (closed !== undefined) throw closed;
    return model;
  }

  /** As find, except that a session its client closed is found too, with the 400 that says so. */
  async locate(id: string, target: ServedModel | undefined): Promise<FoundSession> {
    const served = this.#registry.served();
    // A session live on this replica is found without asking the shared tier; one opened
    // on another replica is looked up there, for every model at once.
    let found = mostTelling(served.map((model) => ({ model, lookup: model.sequences?.lookup(id) })));
    if (found?.lookup.kind !== "live" && served.some((model) => model.sequences?.locate !== undefined)) {
      const located = await Promise.all(
        served.map(async (model) => {
          const sequences = model.sequences;
          return {
            model,
            lookup: sequences?.locate === undefined ? sequences?.lookup(id) : await sequences.locate(id),
          };
        }),
      );
      found = mostTelling(located);
    }
    if (found === undefined) {
      const unloaded = this.#registry.unloadedSequence?.(id);
      if (unloaded !== undefined) throw invalidArg(this.#unloaded(id, unloaded));
      throw invalidArg(
        `unknown session id '${id}': no session with this id is open on this server (open one with X-Amzn-SageMaker-Session-Id: ${NEW_SESSION})`,
      );
    }
    const { model, lookup } = found;
    if (target !== undefined && target.name !== model.name) {
      throw invalidArg(
        `session '${id}' belongs to model '${model.name}', not to TargetModel '${target.name}'`,
      );
    }
    if (lookup.kind === "live") {
      if (lookup.expiresAtMs !== undefined && Date.now() >= lookup.expiresAtMs) {
        throw invalidArg(this.#expired(id, lookup.expiresAtMs));
      }
      return { model, closed: undefined };
    }
    if (lookup.reason === "end") {
      const closed = invalidArg(
        `session '${id}' is closed (closed at ${iso(lookup.endedAtMs)}): open a new session with ${NEW_SESSION}`,
      );
      return { model, closed };
    }
    if (lookup.reason === "expired") throw invalidArg(this.#expired(id, lookup.endedAtMs));
    throw invalidArg(
      `session '${id}' ended at ${iso(lookup.endedAtMs)}: ${why(lookup.reason)}; open a new session with ${NEW_SESSION}`,
    );
  }

  /** Why a session of a model version unloaded since cannot be used: as for a served model's, naming the model. */
  #unloaded(id: string, end: UnloadedSequenceEnd): string {
    const model = `model '${end.model}' version ${end.version}`;
    if (end.reason === "end") {
      return `session '${id}' is closed (closed at ${iso(end.endedAtMs)}; its ${model} has been unloaded since): open a new session with ${NEW_SESSION}`;
    }
    if (end.reason === "expired") return this.#expired(id, end.endedAtMs);
    const cause =
      end.reason === "unloaded"
        ? `its ${model} was unloaded`
        : `${why(end.reason)} (its ${model} has been unloaded since)`;
    return `session '${id}' ended at ${iso(end.endedAtMs)}: ${cause}; open a new session with ${NEW_SESSION}`;
  }

  #expired(id: string, atMs: number): string {
    return `session '${id}' expired at ${iso(atMs)} (sessions last ${this.#ttlSecs} s from opening): open a new session with ${NEW_SESSION}`;
  }
}
