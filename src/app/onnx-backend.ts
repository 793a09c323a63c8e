import { loadOnnxModel } from "../backends/onnx/onnx-backend.ts";
import { onnxSessionOptions } from "../backends/onnx/session-options.ts";
import type { BackendSettings } from "../config/backend-config.ts";
import type { ModelBackend } from "../core/backend.ts";
import type { Logger } from "../observability/logger.ts";

/**
 * ONNX Runtime in worker threads: one session per instance, for models of both ONNX
 * backends (onnxruntime, and the stateful backend, whose state the core keeps).
 */
export function onnxBackend(logger: Logger, settings: BackendSettings): ModelBackend {
  return {
    open: (request) => {
      const sessionOptions = onnxSessionOptions(request.parameters, request.graphOptimizationLevel);
      const severity = settings.ortLogSeverity[request.backendName];
      return loadOnnxModel({
        modelName: request.modelName,
        modelPath: request.modelPath,
        instanceCount: request.instanceCount,
        sessionOptions:
          severity === undefined ? sessionOptions : { ...sessionOptions, logSeverityLevel: severity },
        logger,
      });
    },
  };
}
