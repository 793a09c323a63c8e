import { SettingFlagError } from "../config/setting-flag.ts";

/** A command line seqserve cannot run: the message names the flag or variable at fault. */
export class UsageError extends Error {
  override name = "UsageError";
}

/** Errors of the settings readers, as usage errors. */
export function asUsageError(error: unknown): unknown {
  return error instanceof SettingFlagError ? new UsageError(error.message) : error;
}
