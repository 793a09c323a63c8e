import { relative, resolve, sep } from "node:path";

/**
 * The path of `file`, a name a config gives relative to `folder`, when it names something
 * inside that folder; undefined when it leaves it (`..`, an absolute path) or names the
 * folder itself. A config may come from a client (a load request's override): the files
 * it names must not reach beyond the model's folder.
 */
export function fileInFolder(folder: string, file: string): string | undefined {
  const path = resolve(folder, file);
  const inside = relative(folder, path);
  if (
    file === "" ||
    inside === "" ||
    inside === ".." ||
    inside.startsWith(`..${sep}`) ||
    inside.startsWith(sep)
  )
    return undefined;
  return path;
}

/** Whether `file` names something inside whatever folder it is read from (see fileInFolder). */
export function namesFileInside(file: string): boolean {
  // A relative name stays inside one folder exactly when it stays inside any other.
  return fileInFolder(resolve(sep, "folder"), file) !== undefined;
}
