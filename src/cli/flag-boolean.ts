import { readBoolean } from "../config/setting-flag.ts";
import { asUsageError } from "./usage-error.ts";

/** A boolean flag's value in Triton's spelling (true/false, on/off, 1/0, any case); else a usage error. */
export function flagBoolean(name: string, value: string): boolean {
  try {
    return readBoolean(`--${name}`, value);
  } catch (error) {
    throw asUsageError(error);
  }
}
