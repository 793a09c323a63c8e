import { createHash } from "node:crypto";
import type { BigIntStats } from "node:fs";
import { opendir, stat } from "node:fs/promises";
import { join } from "node:path";
import type { ModelSource } from "./model-source.ts";

// What a model's folder holds, as a fingerprint: a load of a model serving what its folder
// holds changes nothing, and poll mode reloads a model when its fingerprint changes. As
// Triton's GetPathModifiedTime (model_repository_manager.cc), it covers every level of the
// folder, following symbolic links as Triton's stat() does, and counts a file's change
// time with its modification time (Triton takes the later of st_mtim and st_ctim): a
// handler's 1/lib/sub/value.ts counts as much as its 1/model.ts. Triton's walk has no
// bound (a link loop ends only when the path grows too long for stat()); this one has.
// Triton walks off its request threads; here the walk is asynchronous (each read and stat
// on libuv's thread pool), so requests are answered while the poll, or a load request,
// looks at a large folder: walked synchronously, 4,096 entries held the event loop for
// some 65 ms, and a poll over 12 such models for 0.8 s each round.

/**
 * The most files and folders a fingerprint looks at. The poll computes every model's at
 * each round: 4,096 entries take some 60–220 ms of stat() calls (15–50 µs each), a bounded
 * cost where models hold a handful of files and a handler's sources some dozens. A folder
 * bundling a whole environment (a Python venv) holds more: its first 4,096 entries, level
 * by level (the config and the version folders' own files first), are looked at, and each
 * load warns that changes past them are not seen.
 */
export const SIGNATURE_MAX_ENTRIES = 4096;

/**
 * The stat() calls one fingerprint has under way at once: libuv's thread pool has 4
 * threads (unless UV_THREADPOOL_SIZE says otherwise), shared with every other file read,
 * DNS lookup and compression of the server, so one walk keeps them busy without queueing
 * far ahead of the server's other work.
 */
const STAT_CONCURRENCY = 4;

export interface SourceSignature {
  /** A hash of the names, sizes, and modification and change times of everything looked at. */
  readonly value: string;
  /** The folder holds more than `SIGNATURE_MAX_ENTRIES`: changes past them are not seen. */
  readonly truncated: boolean;
}

/**
 * The fingerprint of `source`'s folder, read breadth first (each folder's entries sorted),
 * so the shallow files that say what is served always count. A folder reached twice (a
 * link to a folder walked already, a link loop) is walked once. A folder's entries are
 * stat()ed a few at a time, and hashed in their sorted order once all are: the same folder
 * gives the same fingerprint whichever stat() ends first.
 */
export async function sourceSignature(
  source: ModelSource,
  maxEntries = SIGNATURE_MAX_ENTRIES,
): Promise<SourceSignature> {
  const hash = createHash("sha256");
  const walked = new Set<string>();
  const folders: string[] = [];
  const root = await statOf(source.dir);
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
    const names = await readNames(dir, budget);
    if (names.more) truncated = true;
    budget -= names.read.length;
    const paths = names.read.map((name) => join(dir, name));
    const stats = await statsOf(paths);
    paths.forEach((path, j) => {
      const stat = stats[j];
      // Unreadable (a dangling link, a file going away): as Triton, not a change by itself.
      if (stat === undefined) return;
      if (stat.isDirectory()) {
        hash.update(`${path}/\n`);
        const id = folderId(stat);
        if (!walked.has(id)) {
          walked.add(id);
          folders.push(path);
        }
      } else hash.update(`${path}\0${stat.size}\0${stat.mtimeNs}\0${stat.ctimeNs}\n`);
    });
  }
  // An OVMS entry changes with its config.json text as well as with its files.
  if (source.ovms !== undefined) hash.update(`\0${source.ovms.entry.definition}`);
  if (truncated) hash.update("\0truncated");
  return { value: hash.digest("hex"), truncated };
}

/** Follows links, as Triton's stat() does. */
async function statOf(path: string): Promise<BigIntStats | undefined> {
  try {
    return await stat(path, { bigint: true });
  } catch {
    return undefined;
  }
}

/** Each path's stat (in the same order), at most `STAT_CONCURRENCY` under way at once. */
async function statsOf(paths: readonly string[]): Promise<(BigIntStats | undefined)[]> {
  const stats = new Array<BigIntStats | undefined>(paths.length);
  let next = 0;
  const statNext = async (): Promise<void> => {
    while (next < paths.length) {
      const j = next++;
      stats[j] = await statOf(paths[j] as string);
    }
  };
  await Promise.all(Array.from({ length: Math.min(STAT_CONCURRENCY, paths.length) }, statNext));
  return stats;
}

/** One id for a folder however it is reached (bigint: inode numbers past 2^53 stay apart). */
function folderId(stat: BigIntStats): string {
  return `${stat.dev}:${stat.ino}`;
}

/**
 * Up to `limit` of `dir`'s entry names, sorted; `more` when it holds others. A folder of a
 * million files is read no further than the budget left.
 */
async function readNames(dir: string, limit: number): Promise<{ read: string[]; more: boolean }> {
  const read: string[] = [];
  let more = false;
  try {
    // Leaving the loop (the limit, an error) closes the folder.
    for await (const entry of await opendir(dir)) {
      if (read.length === limit) {
        more = true;
        break;
      }
      read.push(entry.name);
    }
  } catch {}
  return { read: read.sort(), more };
}
