import { loadHandlerModel } from "../backends/handler/handler-backend.ts";
import type { ModelCalls } from "../backends/handler/handler-executor.ts";
import { TYPESCRIPT_BACKEND } from "../config/index.ts";
import type { ModelBackend } from "../core/backend.ts";
import { unavailable } from "../core/errors.ts";
import type { ModelRegistry } from "../core/model.ts";
import type { Logger } from "../observability/logger.ts";

// Which backend opens a model: model code (backend "typescript") in handler workers,
// everything else with ONNX Runtime. Handlers call other models through the registry,
// which exists only once the repository has opened: until then their calls are refused.

export interface RegistryCalls extends ModelCalls {
  /** The models handlers may call, once they are served. */
  attach(registry: ModelRegistry): void;
}

export function registryCalls(): RegistryCalls {
  let registry: ModelRegistry | undefined;
  const models = (): ModelRegistry => {
    if (registry === undefined) {
      throw unavailable(
        "other models cannot be called while the server is loading its models (from initialize())",
      );
    }
    return registry;
  };
  return {
    attach: (served) => {
      registry = served;
    },
    infer: async (model, version, request) => models().model(model, version).infer(request),
    closeSequence: (model, id) => models().model(model).sequences?.close(id) ?? false,
  };
}

export function handlerBackend(logger: Logger, calls: ModelCalls): ModelBackend {
  return {
    open: (request) =>
      loadHandlerModel({
        modelName: request.modelName,
        version: request.version ?? "1",
        modelPath: request.modelPath,
        instanceCount: request.instanceCount,
        parameters: request.parameters,
        calls,
        logger,
      }),
  };
}

/** Model code to the handler backend, other models to `onnx`. */
export function modelBackends(onnx: ModelBackend, handlers: ModelBackend): ModelBackend {
  return {
    open: (request) => (request.backendName === TYPESCRIPT_BACKEND ? handlers : onnx).open(request),
  };
}
