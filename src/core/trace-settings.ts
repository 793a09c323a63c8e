// The trace settings clients read and change while the server runs (Triton's trace
// extension): one global setting, and per model a setting whose unset fields follow the
// global one. Protocol-free: each frontend writes them in its own form.

/** What a traced request records; both off is Triton's level OFF. */
export interface TraceLevel {
  readonly timestamps: boolean;
  readonly tensors: boolean;
}

export interface TraceSettingsView {
  readonly level: TraceLevel;
  /** One request in `rate` is traced. */
  readonly rate: number;
  /** Traces left to take; -1 never stops. */
  readonly count: number;
  /** Triton mode: every this many traces close one indexed file; 0 writes the trace file. */
  readonly logFrequency: number;
  /** Triton mode: the trace file ("" when none was given at start). */
  readonly file: string;
  readonly mode: "triton" | "opentelemetry";
  /** The mode's own options, as given at start (OpenTelemetry's exporter and resource). */
  readonly modeOptions: readonly (readonly [string, string])[];
}

/** A change: a value sets the field, null clears it (back to the global or start value). */
export interface TraceSettingsChange {
  readonly level?: TraceLevel | null;
  readonly rate?: number | null;
  readonly count?: number | null;
  readonly logFrequency?: number | null;
}

export interface TraceSettingsControl {
  /** The setting `model` follows (its own, else the global one), or the global one. */
  current(model?: string): TraceSettingsView;
  /** Applies `change` to the global setting, or to `model`'s, and returns the result. */
  update(model: string | undefined, change: TraceSettingsChange): Promise<TraceSettingsView>;
}
