import { loadOnnxModel } from "../backends/onnx/onnx-backend.ts";
import { onnxSessionOptions } from "../backends/onnx/session-options.ts";
import type { ModelBackend } from "../core/backend.ts";
import type { Logger } from "../observability/logger.ts";

/** ONNX Runtime in worker threads: one session per instance. */
export function onnxBackend(logger: Logger): ModelBackend {
  return {
    open: (request) =>
      loadOnnxModel({
        modelName: request.modelName,
        modelPath: request.modelPath,
        instanceCount: request.instanceCount,
        sessionOptions: onnxSessionOptions(request.parameters, request.graphOptimizationLevel),
        logger,
      }),
  };
}
