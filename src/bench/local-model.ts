import { existsSync } from "node:fs";
import { join } from "node:path";
import ort from "onnxruntime-node";
import { datatypeOfOrtType } from "../backends/onnx/onnx-types.ts";
import {
  parseModelConfigFile,
  readLoadSettings,
  resolveModelConfig,
  TYPESCRIPT_BACKEND,
} from "../config/index.ts";
import { withModelCodeBackend } from "../config/model-code.ts";
import type { ModelConfig } from "../core/model-config.ts";
import type { ModelIo, ModelTensorInfo } from "../core/model-io.ts";
import { selectVersions, versionFolders, versionPath } from "../repository/version-folders.ts";

// A model of a Triton-style repository opened in this process with ONNX Runtime's public
// API, beside the server: its resolved configuration (what the server serves) and a
// session of one intra-op thread (as each of the server's instances). The benchmark's
// oracle and its in-process limit run on it.

export interface LocalModel {
  readonly config: ModelConfig;
  readonly session: ort.InferenceSession;
  readonly path: string;
}

function tensorInfo(metadata: ort.InferenceSession.ValueMetadata): ModelTensorInfo {
  if (!metadata.isTensor)
    return { name: metadata.name, datatype: undefined, typeName: "non-tensor", shape: undefined };
  return {
    name: metadata.name,
    datatype: datatypeOfOrtType(metadata.type),
    typeName: metadata.type,
    shape: metadata.shape.map((d) => (typeof d === "number" && d >= 0 ? d : -1)),
  };
}

/**
 * The model `name` of `repository` opened in process; undefined for model code (a
 * TypeScript handler), which ONNX Runtime cannot run alone.
 */
export async function openLocalModel(repository: string, name: string): Promise<LocalModel | undefined> {
  const dir = join(repository, name);
  const file = ["config.pbtxt", "config.json"].map((f) => join(dir, f)).find((f) => existsSync(f));
  const parsed = withModelCodeBackend(
    file === undefined ? undefined : await parseModelConfigFile(file),
    dir,
    false,
  );
  const settings = readLoadSettings(parsed, name, dir);
  if (settings.backend === TYPESCRIPT_BACKEND) return undefined;
  const versions = selectVersions(versionFolders(dir), settings.versionPolicy);
  const version = versions.at(-1);
  if (version === undefined) throw new Error(`model '${name}' has no version to serve in ${dir}`);
  const path = versionPath(dir, version, settings.defaultModelFilename);
  const session = await ort.InferenceSession.create(path, {
    intraOpNumThreads: 1,
    interOpNumThreads: 1,
    executionMode: "sequential",
    graphOptimizationLevel: settings.graphOptimization,
  });
  const io: ModelIo = {
    inputs: session.inputMetadata.map(tensorInfo),
    outputs: session.outputMetadata.map(tensorInfo),
  };
  const { config } = resolveModelConfig({ parsed, modelName: name, modelDir: dir, modelIo: io });
  return { config, session, path };
}
