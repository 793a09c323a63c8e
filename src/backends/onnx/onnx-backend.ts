import { stat } from "node:fs/promises";
import type { ResourceLimits } from "node:worker_threads";
import type { OpenedModel } from "../../core/backend.ts";
import { invalidArg, ServerError } from "../../core/errors.ts";
import type { ModelIo } from "../../core/model-io.ts";
import type { Logger } from "../../observability/logger.ts";
import { siblingModule } from "../worker/spawn-worker.ts";
import { WorkerExecutor } from "../worker/worker-executor.ts";
import { type OnnxSessionOptions, onnxSessionOptions } from "./session-options.ts";

// Loads an ONNX model as `instanceCount` instances, each an ONNX Runtime session in its
// own worker thread (onnxruntime-node's run() blocks its thread, and two sessions on one
// thread never overlap).

const WORKER_ENTRY = siblingModule(import.meta.url, "onnx-worker");

export interface LoadOnnxModelOptions {
  readonly modelName: string;
  /** The .onnx file (external data files, if any, beside it). */
  readonly modelPath: string;
  readonly instanceCount: number;
  /** From onnxSessionOptions(config.parameters, graph level); defaults to onnxSessionOptions({}). */
  readonly sessionOptions?: OnnxSessionOptions;
  /**
   * Bounds each instance's JS heap (where BYTES tensors become strings): an instance that
   * outgrows it fails the runs it holds and is replaced, instead of growing without bound.
   */
  readonly workerResourceLimits?: ResourceLimits;
  readonly logger: Logger;
}

/**
 * Starts the instances and loads the model in each. `io` is what the model file declares;
 * executors are named as Triton names instances: `<model>_0`, `<model>_1`, ... Rejects
 * with a ServerError carrying ONNX Runtime's message and the file when the model cannot be
 * loaded; no worker is left running then.
 */
export async function loadOnnxModel(options: LoadOnnxModelOptions): Promise<OpenedModel> {
  const { modelName, modelPath, instanceCount, logger } = options;
  if (!Number.isInteger(instanceCount) || instanceCount < 1) {
    throw invalidArg(`model '${modelName}' needs at least one instance, got ${instanceCount}`);
  }
  const isFile = await stat(modelPath).then(
    (s) => s.isFile(),
    () => false,
  );
  if (!isFile) throw new ServerError("UNAVAILABLE", `unable to find '${modelPath}' for model '${modelName}'`);

  const sessionOptions = options.sessionOptions ?? onnxSessionOptions({}, undefined);
  const executors = Array.from(
    { length: instanceCount },
    (_, i) =>
      new WorkerExecutor({
        name: `${modelName}_${i}`,
        entry: WORKER_ENTRY,
        load: { type: "load", instanceName: `${modelName}_${i}`, modelPath, sessionOptions },
        logger: logger.child({ model: modelName }),
        ...(options.workerResourceLimits === undefined
          ? {}
          : { resourceLimits: options.workerResourceLimits }),
      }),
  );
  const loads = await Promise.allSettled(executors.map((executor) => executor.start()));
  const failed = loads.find((load) => load.status === "rejected");
  if (failed !== undefined) {
    await Promise.all(executors.map((executor) => executor.close()));
    throw failed.reason;
  }
  const io = (loads[0] as PromiseFulfilledResult<ModelIo>).value;
  logger.info({ model: modelName, instances: instanceCount, sessionOptions }, "onnx model loaded");
  return { io, executors };
}
