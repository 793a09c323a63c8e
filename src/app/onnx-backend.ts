import { readGraphDescription } from "../backends/onnx/graph-description.ts";
import { loadOnnxModel, onnxHosts } from "../backends/onnx/onnx-backend.ts";
import { onnxSessionOptions } from "../backends/onnx/session-options.ts";
import type { BackendSettings } from "../config/backend-config.ts";
import { STATEFUL_BACKEND } from "../config/index.ts";
import type { ModelBackend } from "../core/backend.ts";
import type { Logger } from "../observability/logger.ts";

/**
 * ONNX Runtime in worker threads: one session per instance, for models of both ONNX
 * backends (onnxruntime, and the stateful backend, whose state the core keeps). The
 * instances of all models share at most `workerThreads` threads (0: one each).
 */
export function onnxBackend(logger: Logger, settings: BackendSettings, workerThreads: number): ModelBackend {
  const hosts = onnxHosts(workerThreads);
  return {
    open: async (request) => {
      const sessionOptions = onnxSessionOptions(request.parameters, request.graphOptimizationLevel);
      const severity = settings.ortLogSeverity[request.backendName];
      const opened = await loadOnnxModel({
        modelName: request.modelName,
        modelPath: request.modelPath,
        instanceCount: request.instanceCount,
        hosts,
        sessionOptions:
          severity === undefined ? sessionOptions : { ...sessionOptions, logSeverityLevel: severity },
        logger,
      });
      // The stateful backend finds the state pairs a config does not name (or names as "")
      // in the graph's description.
      if (request.backendName !== STATEFUL_BACKEND || (request.parameters.state_pairs ?? "").trim() !== "")
        return opened;
      try {
        const graphDescription = await readGraphDescription(request.modelPath);
        return { ...opened, io: { ...opened.io, graphDescription } };
      } catch (error) {
        await Promise.all(opened.executors.map((executor) => executor.close()));
        throw error;
      }
    },
  };
}
