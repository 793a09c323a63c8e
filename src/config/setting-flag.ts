// Triton's settings flags — `--backend-config <backend>,<setting>=<value>`,
// `--trace-config [<mode>,]<setting>=<value>`, `--metrics-config <setting>=<value>` — share
// one shape: an optional scope before a comma, then a setting and its value. The value may
// itself hold '=' and ',' (`resource=service.name=x`, `summary_quantiles=0.5:0.05,0.9:0.01`),
// so, as Triton reads them, the scope is what comes before a first comma that precedes the
// first '='.

export interface SettingFlag {
  /** "" when the setting applies to every scope. */
  readonly scope: string;
  readonly key: string;
  readonly value: string;
}

/** Splits one flag value; undefined when it is not `[<scope>,]<setting>=<value>` with each part non-empty. */
export function splitSettingFlag(raw: string): SettingFlag | undefined {
  const equals = raw.indexOf("=");
  if (equals < 0) return undefined;
  const first = raw.indexOf(",");
  const comma = first < equals ? first : -1;
  const scope = comma < 0 ? "" : raw.slice(0, comma).trim();
  const key = raw.slice(comma + 1, equals).trim();
  const value = raw.slice(equals + 1).trim();
  if ((comma >= 0 && scope === "") || key === "" || value === "") return undefined;
  return { scope, key, value };
}

/** A settings flag value seqserve cannot use: the message names the flag and the setting. */
export class SettingFlagError extends Error {
  override name = "SettingFlagError";
}

/** Triton's spelling of a boolean value: true/false, on/off, 1/0, in any case. */
export function readBoolean(flag: string, value: string): boolean {
  const lower = value.toLowerCase();
  if (lower === "true" || lower === "on" || lower === "1") return true;
  if (lower === "false" || lower === "off" || lower === "0") return false;
  throw new SettingFlagError(`${flag} expects true or false, got '${value}'`);
}

/** A whole number from `min` to `max`. */
export function readWholeNumber(flag: string, value: string, min: number, max: number): number {
  const n = Number(value);
  if (!/^-?\d+$/.test(value) || n < min || n > max) {
    throw new SettingFlagError(`${flag} must be a whole number from ${min} to ${max}, got '${value}'`);
  }
  return n;
}
