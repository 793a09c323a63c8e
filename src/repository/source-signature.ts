import { createHash } from "node:crypto";
import { type BigIntStats, opendirSync, statSync } from "node:fs";
import { join } from "node:path";
import type { ModelSource } from "./model-source.ts";

// What a model's folder holds, as a fingerprint: a load of a model serving what its folder
// holds changes nothing, and poll mode reloads a model when its fingerprint changes. As
// Triton's GetPathModifiedTime (model_repository_manager.cc), it covers every level of the
// folder, following symbolic links as Triton's stat() does, and counts a file's change
// time with its modification time (Triton takes the later of st_mtim and st_ctim): a
// handler's 1/lib/sub/value.ts counts as much as its 1/model.ts. Triton's walk has no
// bound (a link loop ends only when the path grows too long for stat()); this one has.

/**
 * The most files and folders a fingerprint looks at. The poll computes every model's at
 * each round, synchronously: 4,096 entries took 60–220 ms here (a stat is 15–50 µs), a
 * bounded pause where models hold a handful of files and a handler's sources some dozens.
 * A folder bundling a whole environment (a Python venv) holds more: its first 4,096
 * entries, level by level (the config and the version folders' own files first), are
 * looked at, and each load warns that changes past them are not seen.
 */
export const SIGNATURE_MAX_ENTRIES = 4096;

export interface SourceSignature {
  /** A hash of the names, sizes, and modification and change times of everything looked at. */
  readonly value: string;
  /** The folder holds more than `SIGNATURE_MAX_ENTRIES`: changes past them are not seen. */
  readonly truncated: boolean;
}

/**
 * The fingerprint of `source`'s folder, read breadth first (each folder's entries sorted),
 * so the shallow files that say what is served always count. A folder reached twice (a
 * link to a folder walked already, a link loop) is walked once.
 */
export function sourceSignature(source: ModelSource, maxEntries = SIGNATURE_MAX_ENTRIES): SourceSignature {
  const hash = createHash("sha256");
  const walked = new Set<string>();
  const folders: string[] = [];
  const root = statOf(source.dir);
  if (root?.isDirectory()) {
    walked.add(folderId(root));
    folders.push(source.dir);
  }
  let budget = maxEntries;
  let truncated = false;
  for (let i = 0; i < folders.length; i++) {
    if (budget === 0) {
      truncated = true;
      break;
    }
    const dir = folders[i] as string;
    const names = readNames(dir, budget);
    if (names.more) truncated = true;
    for (const name of names.read) {
      budget--;
      const path = join(dir, name);
      const stat = statOf(path);
      // Unreadable (a dangling link, a file going away): as Triton, not a change by itself.
      if (stat === undefined) continue;
      if (stat.isDirectory()) {
        hash.update(`${path}/\n`);
        const id = folderId(stat);
        if (!walked.has(id)) {
          walked.add(id);
          folders.push(path);
        }
      } else hash.update(`${path}\0${stat.size}\0${stat.mtimeNs}\0${stat.ctimeNs}\n`);
    }
  }
  // An OVMS entry changes with its config.json text as well as with its files.
  if (source.ovms !== undefined) hash.update(`\0${source.ovms.entry.definition}`);
  if (truncated) hash.update("\0truncated");
  return { value: hash.digest("hex"), truncated };
}

/** Follows links, as Triton's stat() does. */
function statOf(path: string): BigIntStats | undefined {
  try {
    return statSync(path, { bigint: true });
  } catch {
    return undefined;
  }
}

/** One id for a folder however it is reached (bigint: inode numbers past 2^53 stay apart). */
function folderId(stat: BigIntStats): string {
  return `${stat.dev}:${stat.ino}`;
}

/**
 * Up to `limit` of `dir`'s entry names, sorted; `more` when it holds others. A folder of a
 * million files is read no further than the budget left.
 */
function readNames(dir: string, limit: number): { read: string[]; more: boolean } {
  const read: string[] = [];
  let more = false;
  try {
    const handle = opendirSync(dir);
    try {
      for (let entry = handle.readSync(); entry !== null; entry = handle.readSync()) {
        if (read.length === limit) {
          more = true;
          break;
        }
        read.push(entry.name);
      }
    } finally {
      handle.closeSync();
    }
  } catch {}
  return { read: read.sort(), more };
}
