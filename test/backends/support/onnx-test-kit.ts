import assert from "node:assert/strict";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before } from "node:test";
import { ServerError } from "../../../src/core/errors.ts";
import { writeOnnxModel } from "../../../tools/onnx/onnx-model-builder.ts";

// What the ONNX backend tests share: a temporary folder of generated model files for the
// test file that asks for one, and the ServerError a promise is expected to fail with.

export interface ModelFiles {
  /** The folder (valid once the tests run). */
  readonly dir: () => string;
  /** Writes `bytes` as `<name>.onnx` in the folder; its path. */
  file(name: string, bytes: Uint8Array): Promise<string>;
}

/** A folder made before this file's tests and removed after them. */
export function modelFiles(prefix: string): ModelFiles {
  let dir = "";
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), prefix));
  });
  after(async () => {
    await rm(dir, { recursive: true, force: true });
  });
  return {
    dir: () => dir,
    async file(name, bytes) {
      const path = join(dir, `${name}.onnx`);
      await writeOnnxModel(path, bytes);
      return path;
    },
  };
}

export async function rejection(promise: Promise<unknown>): Promise<ServerError> {
  try {
    await promise;
  } catch (error) {
    assert.ok(error instanceof ServerError, `expected a ServerError, got ${String(error)}`);
    return error;
  }
  assert.fail("expected a rejection");
}
