import { readdirSync } from "node:fs";
import { join } from "node:path";
import { unavailable } from "../core/errors.ts";

// The model file of a version folder of an OpenVINO Model Server model (an entry of its
// config.json, or --model_path): OVMS takes any file name, and looks for the file by its
// extension (modelinstance.cpp fetchModelFilepaths: OpenVINO IR's `.xml` + `.bin` first,
// then `.onnx`, the first file of the folder's listing that has it). seqserve serves ONNX
// alone, so the file is the folder's `*.onnx` file; of several, the first in sorted order
// (OVMS's listing order is the file system's, which no one can rely on), and the log says
// which. Triton's repositories keep Triton's rule (`default_model_filename`, else
// model.onnx).

export interface OvmsModelFile {
  readonly path: string;
  /** The other `.onnx` files of the folder, left unused; empty when there is one. */
  readonly passedOver: readonly string[];
}

/** The ONNX file of `versionDir`, or an UNAVAILABLE error that says why there is none. */
export function ovmsModelFile(modelName: string, version: number, versionDir: string): OvmsModelFile {
  let files: string[];
  try {
    files = readdirSync(versionDir, { withFileTypes: true })
      .filter((entry) => !entry.isDirectory())
      .map((entry) => entry.name)
      .sort();
  } catch {
    throw unavailable(`model '${modelName}' version ${version}: folder '${versionDir}' not found`);
  }
  const onnx = files.filter((name) => name.endsWith(".onnx"));
  const [first, ...others] = onnx;
  if (first !== undefined) return { path: join(versionDir, first), passedOver: others };
  if (files.some((name) => name.endsWith(".xml") || name.endsWith(".bin"))) {
    throw unavailable(
      `model '${modelName}' version ${version}: folder '${versionDir}' holds an OpenVINO IR model (.xml/.bin), which seqserve does not serve: ONNX models only (a .onnx file)`,
    );
  }
  throw unavailable(`model '${modelName}' version ${version}: no .onnx file in folder '${versionDir}'`);
}
