import { dirname } from "node:path";
import type { OpenedModel } from "../../core/backend.ts";
import type { Logger } from "../../observability/logger.ts";
import { checkModelFile, startInstances } from "../worker/model-instances.ts";
import { siblingModule } from "../worker/spawn-worker.ts";
import { compileHandler, isTypeScriptHandler } from "./compile-handler.ts";
import { writeCompiledModule } from "./compiled-module-file.ts";
import { HandlerExecutor, type ModelCalls } from "./handler-executor.ts";
import { handlerSettings } from "./handler-settings.ts";

// Loads a handler (model.ts / model.js) as `instanceCount` instances, each a worker thread
// with its own copy of the module, named as Triton names instances (`<model>_0`, ...).

const WORKER_ENTRY = siblingModule(import.meta.url, "handler-worker");
const RUNNING_SOURCES = WORKER_ENTRY.pathname.endsWith(".ts");

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
  await checkModelFile(modelName, modelPath, instanceCount);
  const settings = handlerSettings(modelName, options.parameters);
  // Compiled and written once here for all its instances and their restarts; the file goes
  // when the last instance closes. Run from the sources, the workers have tsx's hooks
  // registered, which misread an ES module outside a "type": "module" package: a model.js
  // is compiled too then.
  const compiled =
    isTypeScriptHandler(modelPath) || RUNNING_SOURCES
      ? await compileHandler(modelName, modelPath)
      : undefined;
  for (const warning of compiled?.warnings ?? []) logger.warn({ model: modelName }, warning);
  const file =
    compiled === undefined ? undefined : await writeCompiledModule(modelPath, compiled.code, instanceCount);
  const { instances: executors, loaded: io } = await startInstances(
    modelName,
    instanceCount,
    (name) =>
      new HandlerExecutor({
        name,
        entry: WORKER_ENTRY,
        load: {
          type: "load",
          instanceName: name,
          modelName,
          version: options.version,
          modelPath,
          ...(file === undefined ? {} : { compiledPath: file.path }),
          parameters: options.parameters,
          limits: settings.limits,
        },
        logger: logger.child({ model: modelName }),
        calls: options.calls,
        timeoutMs: settings.timeoutMs,
        initializeTimeoutMs: settings.initializeTimeoutMs,
        maxHeapMb: settings.maxHeapMb,
        callTimeoutMs: settings.callTimeoutMs,
        ...(file === undefined ? {} : { onClosed: file.release }),
      }),
  );
  logger.info(
    { model: modelName, instances: instanceCount, handler: modelPath, directory: dirname(modelPath) },
    "handler model loaded",
  );
  return { io, executors };
}
