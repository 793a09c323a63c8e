import { mkdirSync, mkdtempSync, rmSync, utimesSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

// Temporary Triton-style model repositories for end-to-end tests: each model is a
// config.pbtxt plus ONNX bytes (generated in code, see tools/onnx) in version folders.

export interface TestModel {
  /** config.pbtxt text; omit to let the server complete the config from the model file. */
  readonly config?: string;
  /** ONNX bytes per version; a single Uint8Array means version 1. */
  readonly onnx: Uint8Array | Readonly<Record<number, Uint8Array>>;
  /** The model file's name in each version folder (default model.onnx). */
  readonly fileName?: string;
  /** Extra files relative to the model folder (e.g. initial_state/zeros.bin). */
  readonly files?: Readonly<Record<string, Uint8Array | string>>;
}

export interface TempRepository {
  readonly path: string;
  add(name: string, model: TestModel): void;
  remove(): void;
}

export function tempRepository(models: Readonly<Record<string, TestModel>> = {}): TempRepository {
  const path = mkdtempSync(join(tmpdir(), "seqserve-test-"));
  const add = (name: string, model: TestModel) => {
    const dir = join(path, name);
    mkdirSync(dir, { recursive: true });
    if (model.config !== undefined) writeFileSync(join(dir, "config.pbtxt"), model.config);
    const versions = model.onnx instanceof Uint8Array ? { 1: model.onnx } : model.onnx;
    for (const [version, bytes] of Object.entries(versions)) {
      mkdirSync(join(dir, version), { recursive: true });
      writeFileSync(join(dir, version, model.fileName ?? "model.onnx"), bytes);
    }
    for (const [file, content] of Object.entries(model.files ?? {})) {
      mkdirSync(join(dir, file, ".."), { recursive: true });
      writeFileSync(join(dir, file), content);
    }
  };
  for (const [name, model] of Object.entries(models)) add(name, model);
  return { path, add, remove: () => rmSync(path, { recursive: true, force: true }) };
}

let touches = 0;
/**
 * Marks model `name`'s `file` (its config.pbtxt) in `repositoryPath` as changed (a newer
 * modification time, the same bytes): a load of a model whose folder did not change since it loaded is
 * not necessary, and changes nothing (as in Triton), so a test reloading a model as it is
 * touches it first.
 */
export function touchModel(repositoryPath: string, name: string, file = "config.pbtxt"): void {
  const when = new Date(Date.now() + ++touches * 1000);
  utimesSync(join(repositoryPath, name, file), when, when);
}
