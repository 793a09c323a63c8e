import { existsSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { cloneParsed, type ParsedModelConfig, SourceLocations } from "./parsed-config.ts";
import { HANDLER_FILENAMES, TYPESCRIPT_BACKEND } from "./resolve/model-identity.ts";

// Model code found by its file: a version folder with model.ts or model.js (and no
// model.onnx; for an OVMS entry, no .onnx file of any name, as OVMS names none) is a handler even when nothing says `backend: "typescript"` — a model
// without a config (Triton's auto-complete), a config that names no backend or platform,
// or an OpenVINO Model Server entry, whose format OVMS also tells from the files.

/** Whether the latest version folder of `modelDir` holds a handler file and no ONNX model (`anyOnnxName`: OVMS's rule, any `*.onnx`). */
function holdsModelCode(modelDir: string, anyOnnxName = false): boolean {
  let versions: string[];
  try {
    versions = readdirSync(modelDir).filter((name) => /^\d+$/.test(name));
  } catch {
    return false;
  }
  const latest = versions.sort((a, b) => Number(a) - Number(b)).at(-1);
  if (latest === undefined) return false;
  const folder = join(modelDir, latest);
  if (existsSync(join(folder, "model.onnx"))) return false;
  if (anyOnnxName && namesInFolder(folder).some((name) => name.endsWith(".onnx"))) return false;
  return HANDLER_FILENAMES.some((file) => existsSync(join(folder, file)));
}

function namesInFolder(folder: string): string[] {
  try {
    return readdirSync(folder);
  } catch {
    return [];
  }
}

/**
 * The config with `backend: "typescript"` when the model is code and the config does not
 * choose otherwise. `fromFiles`: the config was derived rather than written (OVMS), so its
 * backend is only a default.
 */
export function withModelCodeBackend(
  parsed: ParsedModelConfig | undefined,
  modelDir: string,
  fromFiles: boolean,
): ParsedModelConfig | undefined {
  const chosen =
    parsed !== undefined &&
    !fromFiles &&
    (parsed.message.backend !== undefined || parsed.message.platform !== undefined);
  if (chosen || !holdsModelCode(modelDir, fromFiles)) return parsed;
  if (parsed === undefined) {
    return {
      file: modelDir,
      format: "json",
      message: { backend: TYPESCRIPT_BACKEND },
      locations: new SourceLocations(),
    };
  }
  const message = cloneParsed(parsed.message, parsed.locations);
  message.backend = TYPESCRIPT_BACKEND;
  return { ...parsed, message };
}

/** The handler file of a version: the configured name, else model.ts, else model.js. */
export function handlerFile(versionDir: string, filename: string): string {
  const path = join(versionDir, filename);
  if (existsSync(path) || filename !== HANDLER_FILENAMES[0]) return path;
  const fallback = join(versionDir, HANDLER_FILENAMES[1]);
  return existsSync(fallback) ? fallback : path;
}
