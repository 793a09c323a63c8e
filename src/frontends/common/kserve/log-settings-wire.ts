import { invalidArg } from "../../../core/errors.ts";
import type { LogSettings } from "../../../core/model.ts";

// Triton's logging extension on the wire: the settings under their Triton names, and a
// change read from what a client sent (a JSON object, or gRPC SettingValues turned into
// plain values), each setting checked for its type. `null` leaves a setting as it is.

const NAMES = {
  log_file: "logFile",
  log_info: "logInfo",
  log_warning: "logWarning",
  log_error: "logError",
  log_verbose_level: "logVerboseLevel",
  log_format: "logFormat",
} as const satisfies Record<string, keyof LogSettings>;

type WireName = keyof typeof NAMES;

export function logSettingsWire(settings: LogSettings): Record<WireName, string | boolean | number> {
  return {
    log_file: settings.logFile,
    log_info: settings.logInfo,
    log_warning: settings.logWarning,
    log_error: settings.logError,
    log_verbose_level: settings.logVerboseLevel,
    log_format: settings.logFormat,
  };
}

/** The settings a client asks to change; names Triton does not have are ignored, as Triton does. */
export function logSettingsChange(values: Readonly<Record<string, unknown>>): Partial<LogSettings> {
  const change: Record<string, string | boolean | number> = {};
  for (const [wire, name] of Object.entries(NAMES) as [WireName, keyof LogSettings][]) {
    const value = values[wire];
    if (value === undefined || value === null) continue;
    const expected =
      wire === "log_file" || wire === "log_format"
        ? "a string"
        : wire === "log_verbose_level"
          ? "a non-negative integer"
          : "a bool";
    const fits =
      expected === "a string"
        ? typeof value === "string"
        : expected === "a bool"
          ? typeof value === "boolean"
          : typeof value === "number" && Number.isSafeInteger(value) && value >= 0;
    if (!fits) throw invalidArg(`Unable to parse '${wire}': expected ${expected}`);
    change[name] = value as string | boolean | number;
  }
  return change as Partial<LogSettings>;
}
