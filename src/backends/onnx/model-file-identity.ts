import { createHash } from "node:crypto";
import { closeSync, createReadStream, openSync, readSync, type Stats } from "node:fs";

// What makes two ONNX model files the same model, for sharing a session: their bytes
// (SHA-256), and whether a file is still the one that was hashed or loaded. The main
// thread guesses with them where instances should go (session-keys.ts); the worker
// decides with them which sessions it shares (onnx-worker.ts). The worker reads the file
// in one go, as its loads run one at a time in the order they arrive; the main thread
// reads it without making its event loop wait.

/** Whether `a` and `b` are stats of one file unchanged: any write changes its ctime, which cannot be set back (its mtime can). */
export function sameFile(a: Stats, b: Stats): boolean {
  return (
    a.dev === b.dev &&
    a.ino === b.ino &&
    a.size === b.size &&
    a.mtimeMs === b.mtimeMs &&
    a.ctimeMs === b.ctimeMs
  );
}

const DIGEST = "sha256";

/** The digest of the file at `path`, read without blocking the thread. */
export async function digestOf(path: string): Promise<string> {
  const hash = createHash(DIGEST);
  for await (const chunk of createReadStream(path)) hash.update(chunk as Buffer);
  return hash.digest("hex");
}

/** One small read buffer for hashing model files, reused: no file is held whole for it. */
const hashChunk = Buffer.allocUnsafe(64 << 10);

/** The digest of the file at `path`, read before this returns. */
export function digestOfSync(path: string): string {
  const hash = createHash(DIGEST);
  const fd = openSync(path, "r");
  try {
    for (let read = readSync(fd, hashChunk); read > 0; read = readSync(fd, hashChunk)) {
      hash.update(hashChunk.subarray(0, read));
    }
  } finally {
    closeSync(fd);
  }
  return hash.digest("hex");
}
