import { readdirSync, statSync } from "node:fs";
import { join, resolve } from "node:path";
import { type OvmsModelEntry, readOvmsConfig, singleModelConfig } from "../config/index.ts";
import type { SingleModelOptions } from "../config/server-options.ts";

// Where models come from: folders of Triton-style repositories (`<repo>/<model>/`) and
// entries of OpenVINO Model Server config files (`base_path`). Discovery reports problems
// (a name in two places, an unreadable folder) instead of failing the whole server.

export interface ModelSource {
  readonly name: string;
  /** The model's folder: config.pbtxt / config.json and numeric version folders. */
  readonly dir: string;
  /**
   * Served under a name of the loader's choosing (a folder loaded by ModelLoadOptions.dir,
   * as SageMaker names its models by a hash): the config's own `name`, its folder's, gives way to it.
   */
  readonly renamed?: boolean;
  /** For models listed in an OVMS config.json: the file and its entry. */
  readonly ovms?: { readonly file: string; readonly entry: OvmsModelEntry };
}

/**
 * The models listed in OVMS config files, and the one of OVMS's single-model mode (a bad
 * file stops the server: it names the problem), with what the files ask that is not served
 * and why each entry OVMS would not load is left out.
 */
export async function readOvmsSources(
  files: readonly string[],
  singleModel?: SingleModelOptions,
): Promise<{ readonly sources: ModelSource[]; readonly notes: string[]; readonly invalid: string[] }> {
  const sources: ModelSource[] = [];
  const invalid: string[] = [];
  const configs = await Promise.all(files.map(readOvmsConfig));
  if (singleModel !== undefined) configs.push(singleModelConfig(singleModel));
  for (const config of configs) {
    for (const entry of config.models) {
      // As OVMS: an entry it would not load is no model at all (a request for it is "not found").
      if (entry.invalid !== undefined) invalid.push(entry.invalid.message);
      else sources.push({ name: entry.name, dir: entry.basePath, ovms: { file: config.file, entry } });
    }
  }
  return { sources, notes: configs.flatMap((config) => config.notes), invalid };
}

export interface Discovery {
  readonly sources: Map<string, ModelSource>;
  readonly problems: string[];
  /** Names found in more than one place, with why: served from none, as Triton does. */
  readonly duplicates: Map<string, string>;
  /** Every model folder the repositories hold, duplicates included (see `alsoFound`). */
  readonly inRepositories: readonly ModelSource[];
}

/**
 * The models of the Triton repositories and the OVMS config files. `alsoFound` stands for
 * repositories not read again this time (a look at the config files alone): their models
 * as last found still count for names found twice.
 */
export function discoverModels(
  repositories: readonly string[],
  ovmsSources: readonly ModelSource[] = [],
  alsoFound: readonly ModelSource[] = [],
): Discovery {
  const sources = new Map<string, ModelSource>();
  const problems: string[] = [];
  const places = new Map<string, string[]>();
  const inRepositories: ModelSource[] = [...alsoFound];
  const add = (source: ModelSource, where: string) => {
    const seen = places.get(source.name);
    if (seen === undefined) {
      places.set(source.name, [where]);
      sources.set(source.name, source);
    } else seen.push(where);
  };
  // A repository given twice is one repository (Triton keeps them in a set).
  for (const repository of new Set(repositories.map((path) => resolve(path)))) {
    let entries: string[];
    try {
      entries = readdirSync(repository);
    } catch (error) {
      problems.push(`cannot read model repository '${repository}': ${(error as Error).message}`);
      continue;
    }
    for (const name of entries.sort()) {
      if (name.startsWith(".")) continue;
      const dir = join(repository, name);
      try {
        if (!statSync(dir).isDirectory()) continue;
      } catch {
        continue;
      }
      inRepositories.push({ name, dir });
    }
  }
  for (const source of inRepositories) add(source, source.dir);
  for (const source of ovmsSources) add(source, source.ovms?.file ?? source.dir);
  // Triton serves a name found in two repositories from neither: which copy a client gets
  // must not depend on the order of the flags.
  const duplicates = new Map<string, string>();
  for (const [name, where] of places) {
    if (where.length < 2) continue;
    sources.delete(name);
    const why = `model '${name}' is not unique across all model repositories (${where.join(", ")}): it is not served`;
    duplicates.set(name, why);
    problems.push(why);
  }
  return { sources, problems, duplicates, inRepositories };
}
