import { invalidArg, ServerError, unavailable } from "../../core/errors.ts";
import type { ModelRegistry, ServedModel } from "../../core/model.ts";

// Which model an invocation is for: the SDK's TargetModel (X-Amzn-SageMaker-Target-Model)
// when the request names one, else its InferenceComponentName
// (X-Amzn-SageMaker-Inference-Component, a model per component), else the model the server was told to use
// (--sagemaker-model), else the only model served. On a SageMaker multi-model endpoint a
// TargetModel names an artifact such as "vad.tar.gz", the name a model loaded with it is
// served under (multi-model-endpoint.ts): when no model has that exact name, the name
// without the archive extension is tried (a repository's model "vad").

const ARCHIVE_EXTENSION = /\.(tar\.gz|tgz)$/;

const isNotFound = (error: unknown): boolean => error instanceof ServerError && error.code === "NOT_FOUND";

function named(registry: ModelRegistry, name: string): ServedModel {
  try {
    return registry.model(name);
  } catch (error) {
    const bare = name.replace(ARCHIVE_EXTENSION, "");
    if (bare === name || !isNotFound(error)) throw error;
    try {
      return registry.model(bare);
    } catch (bareError) {
      // Neither is served: the refusal names the TargetModel as the caller gave it.
      throw isNotFound(bareError) ? error : bareError;
    }
  }
}

/** The TargetModel's model, or undefined when the request names none. */
export function targetModel(registry: ModelRegistry, target: string | undefined): ServedModel | undefined {
  return target === undefined || target === "" ? undefined : named(registry, target);
}

/** The model serving a request that names no session of its own. */
export function invokedModel(
  registry: ModelRegistry,
  target: ServedModel | undefined,
  defaultModel: string | undefined,
): ServedModel {
  if (target !== undefined) return target;
  if (defaultModel !== undefined) return registry.model(defaultModel);
  const names = [...new Set(registry.served().map((m) => m.name))].sort();
  if (names.length === 1) return registry.model(names[0]!);
  if (names.length === 0) throw unavailable("no model is ready to serve invocations", 1);
  throw invalidArg(
    `this server serves ${names.length} models (${names.map((n) => `'${n}'`).join(", ")}): name one with TargetModel (X-Amzn-SageMaker-Target-Model) or InferenceComponentName, or start seqserve with --sagemaker-model`,
  );
}
