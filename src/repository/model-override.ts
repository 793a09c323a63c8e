import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, isAbsolute, join, relative, resolve, sep } from "node:path";
import { invalidArg } from "../core/errors.ts";

// Triton's model file override: a load request that carries the model's files
// (`file:<version>/<name>`, with its config) loads them from a folder of their own in
// place of the repository's. The folder lives as long as the model it holds: it goes when
// the model is unloaded or loaded again. A file may land only inside the folder, as
// Triton's override checks ("must stay within model directory").

export interface ModelOverride {
  /** The model's folder: the version folders and their files. */
  readonly dir: string;
  /** Deletes the folder. */
  remove(): Promise<void>;
}

/** Writes `files` (paths relative to the model's folder) to a new folder. */
export async function writeModelOverride(
  name: string,
  files: ReadonlyMap<string, Uint8Array>,
): Promise<ModelOverride> {
  const dir = await mkdtemp(join(tmpdir(), "seqserve-model-"));
  const override: ModelOverride = { dir, remove: () => rm(dir, { recursive: true, force: true }) };
  try {
    for (const [path, content] of files) {
      // A leading "/" is the folder's own root, as Triton joins the path to it.
      const target = resolve(dir, path.replace(/^\/+/, ""));
      const inside = relative(dir, target);
      if (inside === "" || inside === ".." || inside.startsWith(`..${sep}`) || isAbsolute(inside)) {
        throw invalidArg(
          `Invalid file parameter 'file:${path}' with normalized path '${inside}' must stay within model directory.`,
        );
      }
      try {
        await mkdir(dirname(target), { recursive: true });
        await writeFile(target, content);
      } catch (error) {
        const code = (error as NodeJS.ErrnoException).code;
        const why =
          code === "ENOTDIR" || code === "EEXIST" || code === "EISDIR"
            ? "the request names this path both as a file and as a folder"
            : `it could not be written (${code ?? (error as Error).message})`;
        throw invalidArg(`Invalid file parameter 'file:${path}' of model '${name}': ${why}`);
      }
    }
  } catch (error) {
    await override.remove();
    throw error;
  }
  return override;
}
