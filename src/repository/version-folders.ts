import { readdirSync } from "node:fs";
import { join } from "node:path";
import type { VersionPolicy } from "../core/model-config.ts";

// A model's numeric version folders, and which of them its version policy serves.

/**
 * Numeric subfolders of `modelDir`, ascending. As Triton, a name with a leading zero
 * ("02") is not a version: its number would name another folder.
 */
export function versionFolders(modelDir: string): number[] {
  const versions: number[] = [];
  for (const entry of readdirSync(modelDir, { withFileTypes: true })) {
    if (!entry.isDirectory() && !entry.isSymbolicLink()) continue;
    if (!/^(0|[1-9]\d*)$/.test(entry.name)) continue;
    versions.push(Number(entry.name));
  }
  return versions.sort((a, b) => a - b);
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

export function versionPath(modelDir: string, version: number, filename: string): string {
  return join(modelDir, String(version), filename);
}
