import { existsSync, readdirSync } from "node:fs";
import { join } from "node:path";
import type { VersionPolicy } from "../core/model-config.ts";

// A model's numeric version folders, and which of them its version policy serves.

/** A model folder's subfolders that are not versions, and are not for Triton to warn about. */
const NOT_VERSIONS = new Set(["warmup", "initial_state", "configs"]);

/**
 * Numeric subfolders of `modelDir`, ascending. As Triton, a name with a leading zero
 * ("02") is not a version: its number would name another folder. OVMS reads such a name
 * as the number it spells (`zeroPadded`): "00000123" is version 123. `ignored` is told of
 * each other subfolder of a Triton model that is not a version, in Triton's words
 * (model_lifecycle.cc VersionsToLoad), the model's own folders (warmup, initial_state,
 * configs) aside.
 */
export function versionFolders(
  modelDir: string,
  zeroPadded = false,
  ignored: (warning: string) => void = () => {},
): number[] {
  const versions = new Set<number>();
  const name = zeroPadded ? /^\d+$/ : /^(0|[1-9]\d*)$/;
  for (const entry of readdirSync(modelDir, { withFileTypes: true })) {
    if (!entry.isDirectory() && !entry.isSymbolicLink()) continue;
    if (name.test(entry.name)) versions.add(Number(entry.name));
    else if (zeroPadded || NOT_VERSIONS.has(entry.name)) continue;
    else if (/^0\d+$/.test(entry.name))
      ignored(`ignore version directory '${entry.name}' which contains leading zeros in its directory name`);
    else ignored(`ignore version directory '${entry.name}' which fails to convert to integral number`);
  }
  return [...versions].sort((a, b) => a - b);
}

export function selectVersions(available: readonly number[], policy: VersionPolicy): number[] {
  switch (policy.kind) {
    case "all":
      return [...available];
    case "latest":
      return available.slice(Math.max(0, available.length - policy.numVersions));
    case "specific":
      return available.filter((v) => policy.versions.includes(v));
  }
}

/** A version's file: in the folder named by its number, or else by its zero-padded number (OVMS). */
export function versionPath(modelDir: string, version: number, filename: string): string {
  const plain = join(modelDir, String(version));
  if (existsSync(plain)) return join(plain, filename);
  const padded = readdirSync(modelDir).find((name) => /^0\d+$/.test(name) && Number(name) === version);
  return join(padded === undefined ? plain : join(modelDir, padded), filename);
}
