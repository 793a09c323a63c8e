import type { ApiCallRecorder } from "./api-calls.ts";
import type { DataType } from "./datatype.ts";
import type { InferRequest, InferResponse, SequenceId } from "./infer.ts";
import type { ModelConfig } from "./model-config.ts";
import type { InferResponseStream } from "./response-stream.ts";
import type { SharedMemoryRegions } from "./shared-memory.ts";
import type { CounterTotals, ModelStatisticsSnapshot } from "./statistics.ts";
import type { TraceSettingsControl } from "./trace-settings.ts";

// The interfaces the frontends program against. The repository implements
// ModelRegistry; each loaded model version is a ServedModel.

export interface TensorMetadata {
  readonly name: string;
  readonly datatype: DataType;
  /** Full shape as the client sends it: the batch dimension included as -1; variable dims -1. */
  readonly shape: readonly number[];
}

export interface ModelMetadata {
  readonly name: string;
  readonly versions: readonly string[];
  readonly platform: string;
  readonly inputs: readonly TensorMetadata[];
  readonly outputs: readonly TensorMetadata[];
}

/** Why a sequence ended; every end goes through one place and is counted by reason. */
export const SEQUENCE_END_REASONS = [
  "end",
  "timeout",
  "restart",
  "forced",
  "cancelled",
  "backlog_timeout",
  "evicted",
  "shutdown",
  "expired",
  /** The model was unloaded (removed from its configuration) while the sequence was live. */
  "unloaded",
  /** The model was reloaded with a different state signature, which the sequence's state does not fit. */
  "reloaded",
  /**
   * The model instance holding the sequence failed (its worker thread died) and was
   * replaced: what model code kept for the sequence there is gone.
   */
  "instance_failed",
  /**
   * The shared state store (a sequence tier) lost the sequence's state: it restarted
   * without persistence. The sequence must start again.
   */
  "state_lost",
] as const;
export type SequenceEndReason = (typeof SEQUENCE_END_REASONS)[number];

export interface SequenceInfo {
  readonly id: SequenceId;
  readonly status: "active" | "backlogged" | "ending";
  readonly ageMs: number;
  readonly idleMs: number;
  /** Requests of this sequence that have run. */
  readonly steps: number;
  /** Requests accepted and not yet run. */
  readonly queued: number;
  readonly stateBytes: number;
  /** Instance and slot holding the sequence; undefined while backlogged. */
  readonly instance: string | undefined;
  readonly slot: number | undefined;
  /** When the sequence ends by itself (epoch ms), if it was opened with an expiry. */
  readonly expiresAtMs: number | undefined;
}

export interface SequenceOpenOptions {
  /**
   * The sequence ends (reason "expired") at this time (epoch ms), wherever it is. Its
   * expiry bounds its life: the model's idle timeout does not apply to it.
   */
  readonly expiresAtMs?: number;
  /** The caller the sequence belongs to (see InferRequest.principal). */
  readonly owner?: string | undefined;
}

/** A caller acting on a sequence; its principal must own the sequence. */
export interface SequenceCaller {
  readonly principal: string | undefined;
}

/** What a model knows of a sequence id: live, ended a short while ago (and why), or nothing. */
export type SequenceLookup =
  | { readonly kind: "live"; readonly expiresAtMs: number | undefined }
  | { readonly kind: "ended"; readonly reason: SequenceEndReason; readonly endedAtMs: number }
  | { readonly kind: "unknown" };

/** How a sequence of a model version since unloaded ended (the repository keeps a bounded memory of them). */
export interface UnloadedSequenceEnd {
  readonly model: string;
  readonly version: string;
  readonly reason: SequenceEndReason;
  readonly endedAtMs: number;
}

/** A model's use of a sequence tier shared with other replicas (state-tiers/, --state-store). */
export interface SequenceTierSummary {
  /** Where the tier is (no credentials). */
  readonly location: string;
  /** Sequences read from the tier because this replica did not hold them. */
  readonly loaded: number;
  /** Steps whose write found the sequence advanced or ended by another replica. */
  readonly conflicts: number;
  /** Sequences this replica let go of, going on elsewhere (a hand-over at shutdown). */
  readonly handedOver: number;
  /** Writes of a step's state or of an end that the tier refused or failed (a full or unreachable store). */
  readonly writeFailures: number;
}

export interface SequenceSummary {
  /** Present when the model keeps its sequences in a shared tier. */
  readonly tier?: SequenceTierSummary;
  readonly live: number;
  readonly backlog: number;
  /** State bytes held by sequences. */
  readonly stateBytes: number;
  /** State memory reserved (slabs allocated ahead of sequences), at least stateBytes. */
  readonly stateAllocatedBytes: number;
  readonly ended: Readonly<Record<SequenceEndReason, number>>;
}

export interface SequenceAdmin {
  list(): SequenceInfo[];
  summary(): SequenceSummary;
  /**
   * Ends a live or backlogged sequence now: requests not yet run fail, a running one
   * completes, then the state is freed. `reason` defaults to "forced" (an operator's
   * DELETE); a stream whose client closed passes "end" or "cancelled". False when the id
   * is unknown, or for "end" and "cancelled" while a server with a shared tier stops:
   * its sequences go on on another replica.
   */
  end(id: SequenceId, reason?: SequenceEndReason): boolean | Promise<boolean>;
  /**
   * Starts a sequence without a request: it takes a slot (or a place in the backlog) now,
   * and its first request begins from fresh state, as a START would. Throws as a START
   * would (UNAVAILABLE when the backlog is full, ALREADY_EXISTS when the id is live).
   */
  open(id: SequenceId, options?: SequenceOpenOptions): void | Promise<void>;
  /**
   * Ends a sequence as an END request would, without running the model: requests it has
   * accepted still run, in order, then its state is freed (reason "end"). False when the
   * id is not live. With a `caller`, refuses (PERMISSION_DENIED) a sequence it does not own.
   */
  close(id: SequenceId, caller?: SequenceCaller): boolean | Promise<boolean>;
  /**
   * Ends a sequence opened without a request (open) whose first request was refused before
   * it ran, as if it had never been opened: no end is counted, none is remembered, as a
   * START refused before it ran leaves nothing. False, doing nothing, when the id is not
   * live or its sequence has run or holds a request (end it instead).
   */
  withdraw?(id: SequenceId): boolean;
  /** Whether `id` is live, ended recently (kept within a bounded memory), or unknown. */
  lookup(id: SequenceId): SequenceLookup;
  /**
   * Throws as a request with `id` would for the id alone (too long, or of a type the
   * model's CORRID control does not take): for a frontend that takes an id before any
   * request carries it.
   */
  checkId(id: SequenceId): void;
  /**
   * Throws PERMISSION_DENIED when `id` names a sequence live here that another caller (API
   * key) started: for a frontend that takes a sequence over before any request carries it.
   */
  checkCaller(id: SequenceId, principal: string | undefined): void;
  /**
   * As lookup, also asking the shared tier (when the model has one) about ids this
   * replica does not hold. With a tier, end, open and close may also need it: their
   * promise settles once the tier has the change.
   */
  locate?(id: SequenceId): Promise<SequenceLookup>;
}

/** One loaded, ready model version. */
export interface ServedModel {
  readonly name: string;
  readonly version: string;
  readonly config: ModelConfig;
  readonly inputs: readonly TensorMetadata[];
  readonly outputs: readonly TensorMetadata[];
  infer(request: InferRequest): Promise<InferResponse>;
  /**
   * Decoupled models (model code that may send any number of responses per request) are
   * served through `stream`; `infer` refuses them. Absent or false: one answer per request.
   */
  readonly decoupled?: boolean;
  /** The request's responses as they are produced; for other models, its one answer. */
  stream?(request: InferRequest): InferResponseStream;
  statistics(): ModelStatisticsSnapshot;
  /** The counters of this load and of those it replaced in place (statistics.ts, CounterTotals). */
  counterTotals?(): CounterTotals;
  /** Class labels, one per line of the file an output's `label_filename` names, by output. */
  readonly labels?: ReadonlyMap<string, readonly string[]>;
  /** How long the version took to load, in seconds (Triton's nv_model_load_duration_secs). */
  readonly loadSeconds?: number;
  /** Requests accepted and not yet answered. */
  readonly pending: number;
  /** Of those, the requests handed to a model instance (running, or next in its worker). */
  readonly running: number;
  /** Present for models served with sequence batching. */
  readonly sequences: SequenceAdmin | undefined;
}

export type ModelState = "READY" | "UNAVAILABLE" | "LOADING" | "UNLOADING";

export interface RepositoryIndexEntry {
  readonly name: string;
  readonly version?: string;
  readonly state?: ModelState;
  readonly reason?: string;
}

export interface ModelRegistry {
  /** A ready version: the given one, or the highest ready one. Throws NOT_FOUND / UNAVAILABLE. */
  model(name: string, version?: string): ServedModel;
  metadata(name: string, version?: string): ModelMetadata;
  /** The model's completed config in Triton's JSON form (as `/config` returns it: 64-bit integers as numbers). */
  configJson(name: string, version?: string): Record<string, unknown>;
  isReady(name: string, version?: string): boolean;
  index(readyOnly?: boolean): RepositoryIndexEntry[];
  load(name: string, options?: ModelLoadOptions): Promise<void>;
  unload(name: string): Promise<void>;
  /** Statistics of one model (all its versions, or one), or of every model. */
  statistics(name?: string, version?: string): ModelStatisticsSnapshot[];
  /** Every ready model version. */
  served(): ServedModel[];
  /**
   * How sequence `id` of a model version unloaded since ended (the unload, or what ended
   * it before), while a bounded memory keeps it; undefined when none of them had it. The
   * versions served answer for their own sequences (SequenceAdmin.lookup).
   */
  unloadedSequence?(id: SequenceId): UnloadedSequenceEnd | undefined;
  /**
   * OVMS's config reload on request: the config files read again and applied now.
   * Whether anything changed; throws when a file cannot be read or parsed.
   */
  reloadConfig?(): Promise<boolean>;
}

/** What a load request may carry besides the model's name (Triton's load parameters). */
export interface ModelLoadOptions {
  /** A model config (Triton's JSON form) to load instead of the repository's. */
  readonly config?: string;
  /**
   * The model folder's files by path (`1/model.onnx`), loaded in place of the repository's
   * folder (Triton's file override; `config` is then required).
   */
  readonly files?: ReadonlyMap<string, Uint8Array>;
  /**
   * A model folder elsewhere on disk (its config.pbtxt and version folders), loaded under
   * the name in place of the repository's, as Triton loads a repository registered with a
   * name for its model (SageMaker's multi-model endpoint). Unloaded, the name is forgotten;
   * the folder is left as it is.
   */
  readonly dir?: string;
}

export interface ServerMetadata {
  readonly name: string;
  readonly version: string;
  readonly extensions: readonly string[];
}

/** What a frontend is given: the models, and the server's health. */
export interface ServerContext {
  readonly registry: ModelRegistry;
  readonly metadata: ServerMetadata;
  isLive(): boolean;
  isReady(): boolean;
  /** Stopping (a signal): health checks answer UNAVAILABLE "Server exiting", as Triton's. */
  isExiting?(): boolean;
  /** The log settings clients may read and change (Triton's logging extension). */
  readonly logging?: LogSettingsControl;
  /** The trace settings clients may read and change (Triton's trace extension). */
  readonly tracing?: TraceSettingsControl;
  /** The regions of memory clients share with the server (Triton's system shared memory extension). */
  readonly sharedMemory?: SharedMemoryRegions;
  /** Where frontends record the calls they answer, when metrics count them per API (OVMS's). */
  readonly apiCalls?: ApiCallRecorder;
}

/** The server's log settings, as Triton's logging extension shows them. */
export interface LogSettings {
  readonly logFile: string;
  readonly logInfo: boolean;
  readonly logWarning: boolean;
  readonly logError: boolean;
  readonly logVerboseLevel: number;
  /** "default" or "ISO8601". */
  readonly logFormat: string;
}

export interface LogSettingsControl {
  current(): LogSettings;
  /** Applies what `change` sets (checked by the frontend for type) and returns the result. */
  update(change: Partial<LogSettings>): LogSettings;
}
