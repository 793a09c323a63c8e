import type { VersionPolicy } from "../../core/model-config.ts";
import type { MessageNode } from "./config-node.ts";

// Which model a config describes and which files it serves: its name, platform and
// backend, model file name and version policy, with Triton's defaults filled in.

const ONNX_PLATFORM = "onnxruntime_onnx";
export const ONNX_BACKEND = "onnxruntime";
/** Triton's ONNX stateful backend (triton-inference-server/stateful_backend): ONNX models whose state the server keeps. */
export const STATEFUL_BACKEND = "stateful";
const DEFAULT_MODEL_FILENAME = "model.onnx";
/** Model code in TypeScript or JavaScript (src/handler-api.ts): `model.ts`, else `model.js`. */
export const TYPESCRIPT_BACKEND = "typescript";
export const HANDLER_FILENAMES = ["model.ts", "model.js"] as const;

export interface ModelIdentity {
  readonly name: string;
  readonly platform: string;
  readonly backend: string;
  readonly defaultModelFilename: string;
}

const UNSUPPORTED =
  `seqserve serves ONNX models (platform '${ONNX_PLATFORM}', backend '${ONNX_BACKEND}', ` +
  `or the ONNX stateful backend '${STATEFUL_BACKEND}') and model code (backend '${TYPESCRIPT_BACKEND}')`;

function checkFileName(root: MessageNode, field: string, filename: string, where: string): void {
  if (filename.includes("/") || filename.includes("\\") || filename === "." || filename === "..") {
    root.fail(field, `${where} '${filename}' must name a file inside the version directory`);
  }
}

/** The stateful backend names its file in the `onnx_file_name` parameter. */
function statefulFileName(root: MessageNode): string | undefined {
  const entry = root.map("parameters").onnx_file_name;
  if (typeof entry !== "object" || Array.isArray(entry)) return undefined;
  const value = entry.string_value;
  if (typeof value !== "string" || value === "") return undefined;
  checkFileName(root, "parameters", value, "parameter 'onnx_file_name'");
  return value;
}

export function resolveIdentity(root: MessageNode): ModelIdentity {
  const { modelName } = root.ctx;
  const name = root.string("name");
  if (name !== "" && name !== modelName) {
    root.fail(
      "name",
      `unexpected directory name '${modelName}' for model '${name}', directory name must equal model name`,
    );
  }
  root.set("name", modelName);

  const platform = root.string("platform");
  const backend = root.string("backend");
  if (platform !== "" && platform !== ONNX_PLATFORM) {
    root.fail("platform", `platform '${platform}' of model '${modelName}' is not supported: ${UNSUPPORTED}`);
  }
  if (
    backend !== "" &&
    backend !== ONNX_BACKEND &&
    backend !== STATEFUL_BACKEND &&
    backend !== TYPESCRIPT_BACKEND
  ) {
    root.fail("backend", `backend '${backend}' of model '${modelName}' is not supported: ${UNSUPPORTED}`);
  }
  if (backend === TYPESCRIPT_BACKEND) return typeScriptIdentity(root, platform);
  if (backend === STATEFUL_BACKEND && platform !== "") {
    root.fail(
      "platform",
      `model '${modelName}' sets both platform '${platform}' and backend '${STATEFUL_BACKEND}'; the stateful backend takes no platform`,
    );
  }
  const stateful = backend === STATEFUL_BACKEND;
  // Triton completes an ONNX Runtime model's platform; a custom backend such as the
  // stateful one keeps an empty platform, which is what its model metadata reports.
  if (!stateful) root.set("platform", ONNX_PLATFORM).set("backend", ONNX_BACKEND);

  const runtime = root.string("runtime");
  if (runtime !== "") root.ctx.note(`runtime '${runtime}' is ignored: seqserve runs ONNX Runtime itself`);

  const configured = root.string("default_model_filename");
  if (configured !== "") checkFileName(root, "default_model_filename", configured, "default_model_filename");
  const filename = (stateful ? statefulFileName(root) : undefined) ?? (configured || DEFAULT_MODEL_FILENAME);
  root.set("default_model_filename", configured || filename);

  return {
    name: modelName,
    platform: stateful ? "" : ONNX_PLATFORM,
    backend: stateful ? STATEFUL_BACKEND : ONNX_BACKEND,
    defaultModelFilename: filename,
  };
}

/** Model code: no platform; its file is `default_model_filename`, else model.ts, else model.js. */
function typeScriptIdentity(root: MessageNode, platform: string): ModelIdentity {
  const { modelName } = root.ctx;
  if (platform !== "") {
    root.fail(
      "platform",
      `model '${modelName}' sets both platform '${platform}' and backend '${TYPESCRIPT_BACKEND}'; model code takes no platform`,
    );
  }
  const configured = root.string("default_model_filename");
  if (configured !== "") checkFileName(root, "default_model_filename", configured, "default_model_filename");
  return {
    name: modelName,
    platform: "",
    backend: TYPESCRIPT_BACKEND,
    defaultModelFilename: configured || HANDLER_FILENAMES[0],
  };
}

/** The version policy; Triton's default is the single latest version. */
export function resolveVersionPolicy(root: MessageNode): VersionPolicy {
  const policy = root.ensureChild("version_policy");
  const specific = policy.child("specific");
  if (specific !== undefined) {
    const versions = specific.safeNumbers("versions");
    if (versions.length === 0) specific.fail("versions", "the specific version policy lists no versions");
    versions.forEach((version, i) => {
      if (version < 0) specific.failItem("versions", i, `model version ${version} must not be negative`);
    });
    return { kind: "specific", versions };
  }
  if (policy.has("all")) return { kind: "all" };
  const latest = policy.ensureChild("latest");
  if (!latest.has("num_versions")) latest.set("num_versions", 1);
  const numVersions = latest.number("num_versions");
  if (numVersions < 1) latest.fail("num_versions", "the latest version policy must serve at least 1 version");
  return { kind: "latest", numVersions };
}
