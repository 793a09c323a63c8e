import { invalidArg, ServerError } from "../../../core/errors.ts";
import type { ModelRegistry } from "../../../core/model.ts";
import type {
  TraceLevel,
  TraceSettingsChange,
  TraceSettingsControl,
  TraceSettingsView,
} from "../../../core/trace-settings.ts";

// Triton's trace extension on the wire: every setting is a list of strings (HTTP writes a
// one-value list as a plain string, except the level), and a change is read from them as
// Triton's HTTP and gRPC servers read it: integers as `std::stoi` takes them (leading
// digits, in 32-bit range), JSON null (over gRPC, an empty list) clears the setting, names
// Triton does not have are ignored, and the trace file cannot be changed.

const INT32_MAX = 2 ** 31 - 1;
/** The settings a client may change. */
const CHANGEABLE = ["trace_level", "trace_rate", "trace_count", "log_frequency"] as const;
const UINT32_MAX = 2 ** 32 - 1;

/**
 * A trace setting request, in Triton's order: the model (when one is named) must be
 * ready; then the change, when there is one, is read and applied; the answer is the
 * setting that applies.
 */
export async function traceSettingsRequest(
  registry: ModelRegistry,
  tracing: TraceSettingsControl,
  model: string | undefined,
  readChange: (() => TraceSettingsChange) | undefined,
): Promise<TraceSettingsView> {
  if (model !== undefined && !registry.isReady(model))
    throw invalidArg(`Request for unknown model : ${model}`);
  return readChange === undefined ? tracing.current(model) : tracing.update(model, readChange());
}

/** The settings as Triton lists them, each a list of strings. */
export function traceSettingsValues(view: TraceSettingsView): Map<string, string[]> {
  const { timestamps, tensors } = view.level;
  const level =
    timestamps || tensors
      ? [...(timestamps ? ["TIMESTAMPS"] : []), ...(tensors ? ["TENSORS"] : [])]
      : ["OFF"];
  const values = new Map<string, string[]>([
    ["trace_level", level],
    ["trace_rate", [String(view.rate)]],
    ["trace_count", [String(view.count)]],
  ]);
  if (view.mode === "triton") {
    values.set("log_frequency", [String(view.logFrequency)]);
    values.set("trace_file", [view.file]);
  }
  values.set("trace_mode", [view.mode]);
  for (const [key, value] of view.modeOptions) values.set(key, [...(values.get(key) ?? []), value]);
  return values;
}

/** The settings as Triton's HTTP server writes them. */
export function traceSettingsJson(view: TraceSettingsView): Record<string, string | string[]> {
  const json: Record<string, string | string[]> = {};
  for (const [name, value] of traceSettingsValues(view)) {
    json[name] = name === "trace_level" || value.length !== 1 ? value : value[0]!;
  }
  return json;
}

/** A change from an HTTP body: the level a list of strings, the others strings, null to clear. */
export function traceSettingsChangeFromJson(body: Readonly<Record<string, unknown>>): TraceSettingsChange {
  if ("trace_file" in body) throw fileUnchangeable();
  const values: Record<string, readonly string[] | null> = {};
  for (const name of CHANGEABLE) {
    const value = body[name];
    if (value === undefined) continue;
    if (value === null) values[name] = null;
    else if (name === "trace_level") {
      if (!Array.isArray(value) || value.some((level) => typeof level !== "string")) {
        throw invalidArg("Unable to parse 'trace_level': expected an array of strings");
      }
      // Over HTTP only null clears: an empty list sets nothing, as in Triton.
      if (value.length > 0) values[name] = value as string[];
    } else if (typeof value === "string") values[name] = [value];
    else throw invalidArg(`Unable to parse '${name}': expected a string`);
  }
  return traceSettingsChange(values);
}

/** A change from lists of strings (gRPC's SettingValues); an empty list or null clears. */
export function traceSettingsChange(
  values: Readonly<Record<string, readonly string[] | null>>,
): TraceSettingsChange {
  if ("trace_file" in values) throw fileUnchangeable();
  const cleared = (name: string): boolean =>
    values[name] !== undefined && (values[name] === null || values[name]!.length === 0);
  const change: { -readonly [K in keyof TraceSettingsChange]: TraceSettingsChange[K] } = {};
  const level = values.trace_level;
  if (cleared("trace_level")) change.level = null;
  else if (level != null) {
    const read = readLevel(level);
    if (read !== undefined) change.level = read;
  }
  const integer = (name: string, min: number, shownMax: number): number | null | undefined => {
    if (cleared(name)) return null;
    const list = values[name];
    if (list == null) return undefined;
    if (list.length !== 1) throw invalidArg(`expect only 1 value for '${name}'`);
    return readInteger(name, list[0]!, min, shownMax);
  };
  const rate = integer("trace_rate", 0, UINT32_MAX);
  if (rate !== undefined) change.rate = rate;
  const count = integer("trace_count", -1, INT32_MAX);
  if (count !== undefined) change.count = count;
  const logFrequency = integer("log_frequency", 0, UINT32_MAX);
  if (logFrequency !== undefined) change.logFrequency = logFrequency;
  return change;
}

function fileUnchangeable(): ServerError {
  return new ServerError("UNSUPPORTED", "trace file location can not be updated through network protocol");
}

/** Levels add up; OFF only alone; names Triton does not know are skipped (none known: no change). */
function readLevel(names: readonly string[]): TraceLevel | undefined {
  let level: TraceLevel | undefined;
  for (const name of names) {
    if (name === "OFF") {
      if (names.length !== 1) throw invalidArg("Expect only one trace level 'OFF' is specified");
      level = { timestamps: false, tensors: false };
    } else if (name === "TIMESTAMPS") level = { timestamps: true, tensors: level?.tensors === true };
    else if (name === "TENSORS") level = { timestamps: level?.timestamps === true, tensors: true };
  }
  return level;
}

/**
 * An integer as `std::stoi` reads it (leading blanks, a sign, digits; the rest ignored).
 * Past 32 bits it is out of range, as for Triton (which shows the range of the unsigned
 * settings as 32-bit unsigned); so is a negative rate or log frequency, which Triton
 * would wrap around.
 */
function readInteger(name: string, text: string, min: number, shownMax: number): number {
  const digits = /^\s*([+-]?\d+)/.exec(text);
  if (digits === null) throw invalidArg(`Unable to parse '${name}', got: ${text}`);
  const value = Number(digits[1]);
  const outOfRange = (): never => {
    throw invalidArg(
      `Unable to parse '${name}', value is out of range [ ${min}, ${shownMax} ], got: ${text}`,
    );
  };
  if (value > INT32_MAX || value < -INT32_MAX - 1) outOfRange();
  if (value < min) {
    if (min < 0) throw invalidArg(`Unable to parse '${name}'. Expecting value >= ${min}, got: ${text}`);
    outOfRange();
  }
  return value;
}
