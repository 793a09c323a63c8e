import type { Stats } from "node:fs";
import { readdir, stat } from "node:fs/promises";
import { dirname } from "node:path";
import { digestOf, sameFile } from "./model-file-identity.ts";
import type { OnnxSessionOptions } from "./session-options.ts";

// Where an ONNX model's instances should go to share a session with others on a worker
// thread: the main thread's guess, for placement (model-hosts.ts). Whether a session is
// shared is decided by the worker from the bytes it loads (onnx-worker.ts), so a wrong
// guess costs a thread's parallelism or a session's memory, never a model's answers.
// Instances on one thread take turns anyway, and a session is most of a model's memory
// (about 10 MB for Silero VAD's 2.3 MB file).
//
// - A model's own instances, loaded together, get one key (its load's).
// - Two loads (two models over one file or copies of it, or an old and a new version)
//   get one key when their files are likely the same bytes with the same options, each
//   alone in its folder (ONNX Runtime reads external data from files beside the model,
//   which may differ where the model files do not). The bytes are compared (SHA-256)
//   only between files of the same size and options; a file whose inode, size and
//   times are unchanged is taken as unchanged, which only a guess may.

interface KnownFile {
  readonly path: string;
  readonly stats: Stats;
  readonly options: string;
  readonly key: string;
  /** The content's digest, once a file of the same size needed it. */
  digest: Promise<string> | undefined;
}

/** Enough for any repository's models, and a bound for a server that loads files sent to it for ever. */
const MAX_KNOWN = 1024;

export class SessionKeys {
  /** Files alone in their folders, loaded lately (at most MAX_KNOWN): one entry per path and options. */
  readonly #known: KnownFile[] = [];
  #loads = 0;
  /** One key at a time: each decision sees every earlier one. */
  #queue: Promise<unknown> = Promise.resolve();

  /** The placement key of a load of `modelPath` with `options`: loads likely to share a session get the same. */
  keyFor(modelPath: string, options: OnnxSessionOptions): Promise<string> {
    // A file that cannot be read here fails its load in the worker, in ONNX Runtime's words.
    const key = this.#queue.then(() =>
      this.#keyFor(modelPath, JSON.stringify(options)).catch(() => `load:${++this.#loads}`),
    );
    this.#queue = key;
    return key;
  }

  async #keyFor(path: string, options: string): Promise<string> {
    const ownLoad = `load:${++this.#loads}`;
    const [stats, entries] = await Promise.all([stat(path), readdir(dirname(path)).catch(() => [])]);
    if (entries.length !== 1) return ownLoad;

    // A file changed since it was loaded is forgotten: its sessions hold what it was.
    for (const known of this.#known.filter((file) => file.path === path && !sameFile(file.stats, stats))) {
      this.#forget(known);
    }
    const loaded = this.#known.find((file) => file.path === path && file.options === options);
    if (loaded !== undefined) return loaded.key;

    const file: KnownFile = { path, stats, options, key: `file:${ownLoad}`, digest: undefined };
    for (const peer of [...this.#known]) {
      if (peer.options !== options || peer.stats.size !== stats.size) continue;
      if (!(await this.#unchanged(peer))) continue;
      file.digest ??= digestOf(path);
      peer.digest ??= digestOf(peer.path);
      const [mine, theirs] = await Promise.all([file.digest, peer.digest]);
      // Each digest stands for what was (or will be) loaded only if its file did not
      // change while it was read.
      if (mine !== theirs || !(await this.#unchanged(peer))) continue;
      const now = await stat(path).catch(() => undefined);
      if (now === undefined || !sameFile(stats, now)) return ownLoad;
      return this.#remember({ ...file, key: peer.key });
    }
    return this.#remember(file);
  }

  #remember(file: KnownFile): string {
    this.#known.push(file);
    // Loads of files sent with the request each have a folder of their own.
    if (this.#known.length > MAX_KNOWN) this.#known.shift();
    return file.key;
  }

  /** Whether `file` is as it was when it was loaded; it is forgotten if not. */
  async #unchanged(file: KnownFile): Promise<boolean> {
    const now = await stat(file.path).catch(() => undefined);
    if (now !== undefined && sameFile(file.stats, now)) return true;
    this.#forget(file);
    return false;
  }

  #forget(file: KnownFile): void {
    const index = this.#known.indexOf(file);
    if (index >= 0) this.#known.splice(index, 1);
  }
}
