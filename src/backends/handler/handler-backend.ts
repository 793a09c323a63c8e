import { stat } from "node:fs/promises";
import { dirname } from "node:path";
import type { OpenedModel } from "../../core/backend.ts";
import { invalidArg, ServerError } from "../../core/errors.ts";
import type { ModelIo } from "../../core/model-io.ts";
import type { Logger } from "../../observability/logger.ts";
import { HandlerExecutor, type ModelCalls } from "./handler-executor.ts";
import type { HandlerLimits } from "./handler-messages.ts";
import { handlerSettings } from "./handler-settings.ts";

// Loads a handler (model.ts / model.js) as `instanceCount` instances, each a worker thread
// with its own copy of the module, named as Triton names instances (`<model>_0`, ...).

const WORKER_ENTRY = new URL("./handler-worker.ts", import.meta.url);

export interface LoadHandlerModelOptions {
  readonly modelName: string;
  readonly version: string;
  readonly modelPath: string;
  readonly instanceCount: number;
  /** The config's parameters: they reach initialize(), and set the handler's limits. */
  readonly parameters: Readonly<Record<string, string>>;
  readonly calls: ModelCalls;
  readonly logger: Logger;
}

export async function loadHandlerModel(options: LoadHandlerModelOptions): Promise<OpenedModel> {
  const { modelName, modelPath, instanceCount, logger } = options;
  if (!Number.isInteger(instanceCount) || instanceCount < 1) {
    throw invalidArg(`model '${modelName}' needs at least one instance, got ${instanceCount}`);
  }
  const isFile = await stat(modelPath).then(
    (s) => s.isFile(),
    () => false,
  );
  if (!isFile) throw new ServerError("UNAVAILABLE", `unable to find '${modelPath}' for model '${modelName}'`);
  const settings = handlerSettings(modelName, options.parameters);
  const limits: HandlerLimits = settings.limits;
  const executors = Array.from(
    { length: instanceCount },
    (_, i) =>
      new HandlerExecutor({
        name: `${modelName}_${i}`,
        entry: WORKER_ENTRY,
        load: {
          type: "load",
          instanceName: `${modelName}_${i}`,
          modelName,
          version: options.version,
          modelPath,
          parameters: options.parameters,
          limits,
        },
        logger: logger.child({ model: modelName }),
        calls: options.calls,
        timeoutMs: settings.timeoutMs,
        callTimeoutMs: settings.callTimeoutMs,
      }),
  );
  const loads = await Promise.allSettled(executors.map((executor) => executor.start()));
  const failed = loads.find((load) => load.status === "rejected");
  if (failed !== undefined) {
    await Promise.all(executors.map((executor) => executor.close()));
    throw failed.reason;
  }
  const io = (loads[0] as PromiseFulfilledResult<ModelIo | undefined>).value;
  logger.info(
    { model: modelName, instances: instanceCount, handler: modelPath, directory: dirname(modelPath) },
    "handler model loaded",
  );
  return { io, executors };
}
