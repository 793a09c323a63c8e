import { existsSync, readdirSync } from "node:fs";
import { join } from "node:path";
import type { VersionPolicy } from "../core/model-config.ts";

// A model's numeric version folders, and which of them its version policy serves.

/**
 * Numeric subfolders of `modelDir`, ascending. As Triton, a name with a leading zero
 * ("02") is not a version: its number would name another folder. OVMS reads such a name
 * as the number it spells (`zeroPadded`): "00000123" is version 123.
 */
export function versionFolders(modelDir: string, zeroPadded = false): number[] {
  const versions = new Set<number>();
  const name = zeroPadded ? /^\d+$/ : /^(0|[1-9]\d*)$/;
  for (const entry of readdirSync(modelDir, { withFileTypes: true })) {
    if (!entry.isDirectory() && !entry.isSymbolicLink()) continue;
    if (name.test(entry.name)) versions.add(Number(entry.name));
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
