import type { TraceSettings } from "../config/trace-config.ts";
import { invalidArg } from "../core/errors.ts";
import type { InferRequest } from "../core/infer.ts";
import type { RequestObserver, RequestRecord } from "../core/scheduler/request-observer.ts";
import { cloneTensor, type Tensor } from "../core/tensor.ts";
import type { TraceSettingsChange, TraceSettingsControl, TraceSettingsView } from "../core/trace-settings.ts";
import { NONE_SPECIFIED, type TraceFields, TraceSetting } from "./trace-setting.ts";

// Which requests are traced, under settings clients may change while the server runs, as
// Triton's trace manager keeps them: the global setting starts from the launch flags;
// a model's setting exists once a client changed it, and each field it does not set
// follows the global one (a global change reaches it). Clearing a field (null) gives it
// back to its fallback: the launch value for the global setting, the global value for a
// model's; a model setting with nothing set left is dropped. The mode, the trace file and
// the mode's options are chosen at launch.
//
// Traced requests go to a sink: Triton's trace file or OpenTelemetry spans. It is opened
// when a setting first traces, so a server that never traces does not load
// OpenTelemetry.

export interface TraceSink {
  /**
   * Records a request `setting` picked; `inputs`: its input tensors as they arrived (taken
   * when the setting traces tensors).
   */
  record(
    setting: TraceSetting,
    model: string,
    version: string,
    record: RequestRecord,
    inputs?: ReadonlyMap<string, Tensor>,
  ): void;
  /** `setting` no longer applies: whatever it has open is closed. */
  retire(setting: TraceSetting): void;
  /** Sends or writes what is buffered. */
  close(): Promise<void>;
}

/** Opens the sink of the launch mode; undefined when it has nowhere to write. */
export type SinkOpener = () => Promise<TraceSink | undefined>;

const FIELDS = ["level", "rate", "count", "logFrequency"] as const;

interface Picked {
  readonly setting: TraceSetting;
  readonly inputs: ReadonlyMap<string, Tensor> | undefined;
}

function launchFields(settings: TraceSettings): TraceFields {
  return {
    level: { timestamps: settings.timestamps, tensors: settings.tensors },
    rate: settings.rate,
    count: settings.count,
    logFrequency: settings.logFrequency,
  };
}

export class TraceManager implements TraceSettingsControl {
  readonly #launch: TraceSettings;
  readonly #mode: TraceSettings["mode"];
  readonly #openSink: SinkOpener;
  #global: TraceSetting;
  readonly #models = new Map<string, TraceSetting>();
  #sink: Promise<TraceSink | undefined> | undefined;
  /** The sink once open: requests read it without waiting. */
  #openedSink: TraceSink | undefined;

  private constructor(launch: TraceSettings, mode: TraceSettings["mode"], openSink: SinkOpener) {
    this.#launch = launch;
    this.#mode = mode;
    this.#openSink = openSink;
    this.#global = new TraceSetting(launchFields(launch), NONE_SPECIFIED);
  }

  static async create(
    launch: TraceSettings,
    mode: TraceSettings["mode"],
    openSink: SinkOpener,
  ): Promise<TraceManager> {
    const manager = new TraceManager(launch, mode, openSink);
    if (manager.#global.on) await manager.#ensureSink();
    return manager;
  }

  observeRequests(model: string, version: string): RequestObserver {
    // Picked as they arrive, as Triton starts a trace when a request comes (the rate
    // counts arrivals), with their inputs copied then when tensors are traced: the
    // originals go to the model's thread.
    const picked = new WeakMap<InferRequest, Picked>();
    return {
      requestArrived: (request: InferRequest): void => {
        const setting = this.#models.get(model) ?? this.#global;
        if (!setting.on || this.#openedSink === undefined) return;
        const forced = this.#mode === "opentelemetry" && request.trace !== undefined;
        if (!setting.pick(forced)) return;
        picked.set(request, {
          setting,
          // Copies: the originals' transfer to a worker thread leaves them empty.
          inputs: setting.level.tensors
            ? new Map([...request.inputs].map(([name, tensor]) => [name, cloneTensor(tensor)]))
            : undefined,
        });
      },
      requestDone: (record: RequestRecord): void => {
        const trace = picked.get(record.request);
        if (trace === undefined || this.#openedSink === undefined) return;
        picked.delete(record.request);
        this.#openedSink.record(trace.setting, model, version, record, trace.inputs);
      },
    };
  }

  current(model?: string): TraceSettingsView {
    const setting = (model === undefined ? undefined : this.#models.get(model)) ?? this.#global;
    return this.#view(setting);
  }

  async update(model: string | undefined, change: TraceSettingsChange): Promise<TraceSettingsView> {
    const plan = this.#plan(model, change);
    if (plan.traces && this.#openedSink === undefined) {
      await this.#ensureSink();
      // Settings may have changed meanwhile: plan again on what is there now.
      return this.#commit(model, this.#plan(model, change));
    }
    return this.#commit(model, plan);
  }

  async close(): Promise<void> {
    const sink = await this.#sink;
    if (sink === undefined) return;
    for (const setting of [this.#global, ...this.#models.values()]) sink.retire(setting);
    await sink.close();
  }

  /** Opens the sink once; a failed opening is tried again by the next change. */
  #ensureSink(): Promise<TraceSink | undefined> {
    this.#sink ??= this.#openSink().then(
      (sink) => {
        this.#openedSink = sink;
        return sink;
      },
      (error: unknown) => {
        this.#sink = undefined;
        throw error;
      },
    );
    return this.#sink;
  }

  /** The settings after `change`, every one checked, nothing applied yet. */
  #plan(model: string | undefined, change: TraceSettingsChange): Plan {
    const replaced = new Map<string | undefined, TraceSetting | undefined>();
    if (model === undefined) {
      const global = derive(launchFields(this.#launch), this.#global, change);
      replaced.set(undefined, global);
      // The models' settings follow the new global one in the fields they do not set.
      for (const [name, current] of this.#models) replaced.set(name, derive(global, current, {}));
    } else {
      const current = this.#models.get(model);
      const derived = derive(this.#global, current, change);
      replaced.set(model, FIELDS.some((field) => derived.specified[field]) ? derived : undefined);
    }
    for (const setting of replaced.values()) if (setting !== undefined) this.#check(setting);
    const traces = [...replaced.values()].some((setting) => setting?.on === true);
    return { replaced, traces };
  }

  /**
   * Triton refuses a setting that traces but cannot ("the only invalid setting allowed is
   * if it disables tracing"): with rate 0, without a file in triton mode, or with no
   * traces left to take (which Triton refuses without a reason).
   */
  #check(setting: TraceSetting): void {
    if (!setting.on) return;
    const reason =
      setting.rate === 0
        ? "sample rate must be non-zero"
        : this.#mode === "triton" && this.#launch.file === undefined
          ? "trace file name is not given"
          : setting.count === 0
            ? "trace_count is 0, no traces are left to take"
            : undefined;
    if (reason !== undefined) throw invalidArg(`Attempting to set invalid trace setting :${reason}`);
  }

  #commit(model: string | undefined, plan: Plan): TraceSettingsView {
    for (const [name, setting] of plan.replaced) {
      const before = name === undefined ? this.#global : this.#models.get(name);
      if (before !== undefined) this.#openedSink?.retire(before);
      if (name === undefined) this.#global = setting!;
      else if (setting === undefined) this.#models.delete(name);
      else this.#models.set(name, setting);
    }
    return this.current(model);
  }

  #view(setting: TraceSetting): TraceSettingsView {
    const launch = this.#launch;
    const modeOptions: [string, string][] =
      this.#mode === "opentelemetry"
        ? [
            ["url", launch.url],
            ...Object.entries(launch.resource).map(([key, value]): [string, string] => [
              "resource",
              `${key}=${value}`,
            ]),
            ["bsp_max_queue_size", String(launch.bspMaxQueueSize)],
            ["bsp_schedule_delay", String(launch.bspScheduleDelayMs)],
            ["bsp_max_export_batch_size", String(launch.bspMaxExportBatchSize)],
          ]
        : [];
    return {
      level: setting.level,
      rate: setting.rate,
      count: setting.count,
      logFrequency: setting.logFrequency,
      file: launch.file ?? "",
      mode: this.#mode,
      modeOptions,
    };
  }
}

interface Plan {
  /** Each setting replaced (undefined: the global one), by its new value (undefined: dropped). */
  readonly replaced: ReadonlyMap<string | undefined, TraceSetting | undefined>;
  /** Whether any of them traces. */
  readonly traces: boolean;
}

/**
 * A setting after `change`: each field the change sets, or that `current` set and the
 * change does not clear, is its own; the rest come from `fallback`. A count kept from
 * `current` is what it has left.
 */
function derive(
  fallback: TraceFields,
  current: TraceSetting | undefined,
  change: TraceSettingsChange,
): TraceSetting {
  const own = (field: keyof TraceFields): boolean =>
    change[field] === null ? false : change[field] !== undefined || current?.specified[field] === true;
  const value = <K extends keyof TraceFields>(field: K): TraceFields[K] =>
    own(field) ? ((change[field] as TraceFields[K] | undefined) ?? current![field]) : fallback[field];
  return new TraceSetting(
    {
      level: value("level"),
      rate: value("rate"),
      count: value("count"),
      logFrequency: value("logFrequency"),
    },
    { level: own("level"), rate: own("rate"), count: own("count"), logFrequency: own("logFrequency") },
  );
}
