import { invalidArg } from "../../../core/errors.ts";

/** The path's model version: undefined for "the highest ready one", else a positive integer string. */
export function modelVersion(version: string | undefined): string | undefined {
  if (version === undefined) return undefined;
  if (!/^[0-9]+$/.test(version)) {
    throw invalidArg(
      `failed to get model version from specified version string '${version}', version should be an integral value > 0`,
    );
  }
  return version;
}
