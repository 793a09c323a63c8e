import { rmSync } from "node:fs";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { basename, join } from "node:path";

// A compiled handler module (compile-handler.ts) on disk, for its workers to import: Node
// imports an ES module from a file (a data: URL would put the whole module text into every
// stack frame it cannot map). Written once per model load into a private temporary folder,
// shared by the model's instances and their restarts, and removed when the last instance
// closes, or when the process exits first.

export interface CompiledModuleFile {
  readonly path: string;
  /** One holder is done with the file; the last one removes it. */
  release(): void;
}

/** The folders still on disk, removed at exit by one listener however many models load. */
const folders = new Set<string>();
let removeAtExit: (() => void) | undefined;

function track(dir: string): void {
  folders.add(dir);
  if (removeAtExit !== undefined) return;
  removeAtExit = () => {
    for (const folder of folders) rmSync(folder, { recursive: true, force: true });
  };
  process.once("exit", removeAtExit);
}

function remove(dir: string): Promise<void> {
  folders.delete(dir);
  return rm(dir, { recursive: true, force: true });
}

export async function writeCompiledModule(
  modelPath: string,
  code: string,
  holders: number,
): Promise<CompiledModuleFile> {
  const dir = await mkdtemp(join(tmpdir(), "seqserve-handler-"));
  track(dir);
  const path = join(dir, `${basename(modelPath).replace(/\.[^.]*$/, "")}.mjs`);
  try {
    await writeFile(path, code, { mode: 0o600 });
  } catch (error) {
    await remove(dir);
    throw error;
  }
  let left = holders;
  return {
    path,
    release() {
      if (--left === 0) void remove(dir);
    },
  };
}
