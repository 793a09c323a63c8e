import type { ResourceLimits } from "node:worker_threads";
import type { OpenedModel } from "../../core/backend.ts";
import type { ModelIo } from "../../core/model-io.ts";
import type { Logger } from "../../observability/logger.ts";
import { ModelHosts } from "../worker/model-hosts.ts";
import { checkModelFile, startInstances } from "../worker/model-instances.ts";
import type { HeapTrimmer } from "../worker/native-heap.ts";
import { siblingModule } from "../worker/spawn-worker.ts";
import { WorkerExecutor } from "../worker/worker-executor.ts";
import { checkOnnxInputs } from "./input-checks.ts";
import { SessionKeys } from "./session-keys.ts";
import { type OnnxSessionOptions, onnxSessionOptions } from "./session-options.ts";

// Loads an ONNX model as `instanceCount` instances, each an ONNX Runtime session in a
// worker thread (onnxruntime-node's run() blocks its thread, and two sessions on one
// thread never overlap): a thread of its own, or one that `hosts` shares between
// instances once there are more instances than CPUs (model-hosts.ts). Instances on one
// thread load a model once where its sessions would be the same (session-keys.ts).

const WORKER_ENTRY = siblingModule(import.meta.url, "onnx-worker");

/** Threads shared by ONNX model instances, and which of those instances may share a session. */
export class OnnxHosts extends ModelHosts {
  readonly sessionKeys = new SessionKeys();
}

/** The worker threads that ONNX model instances share: at most `maxHosts` (0: one per instance). */
export function onnxHosts(
  maxHosts: number,
  resourceLimits?: ResourceLimits,
  trimmer?: HeapTrimmer,
): OnnxHosts {
  return new OnnxHosts(WORKER_ENTRY, maxHosts, resourceLimits, trimmer);
}

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
  /** The threads to place the instances on (onnxHosts); else each has a thread of its own, as with resource limits. */
  readonly hosts?: OnnxHosts;
  readonly logger: Logger;
}

/**
 * Starts the instances and loads the model in each. `io` is what the model file declares;
 * executors are named as Triton names instances: `<model>_0`, `<model>_1`, ... Rejects
 * with a ServerError carrying ONNX Runtime's message and the file when the model cannot be
 * loaded; no worker is left running then.
 */
export async function loadOnnxModel(
  options: LoadOnnxModelOptions,
): Promise<OpenedModel & { readonly io: ModelIo }> {
  const { modelName, modelPath, instanceCount, logger } = options;
  await checkModelFile(modelName, modelPath, instanceCount);
  const sessionOptions = options.sessionOptions ?? onnxSessionOptions({}, undefined);
  const { hosts } = options;
  const shared = hosts !== undefined && options.workerResourceLimits === undefined;
  const sessionKey = shared ? await hosts.sessionKeys.keyFor(modelPath, sessionOptions) : undefined;
  const { instances: executors, loaded: io } = await startInstances(
    modelName,
    instanceCount,
    (name) =>
      new WorkerExecutor({
        name,
        entry: WORKER_ENTRY,
        load: {
          type: "load",
          modelPath,
          sessionOptions,
          ...(sessionKey === undefined ? {} : { sessionKey }),
        },
        ...(shared ? { host: (key: string) => hosts.place(modelName, key, sessionKey) } : {}),
        logger: logger.child({ model: modelName }),
        ...(options.workerResourceLimits === undefined
          ? {}
          : { resourceLimits: options.workerResourceLimits }),
      }),
  );
  logger.info(
    {
      model: modelName,
      instances: instanceCount,
      sessionOptions,
      ...(shared
        ? {
            instancesPerThread: hosts.sizes,
            instancesOnASharedSession: executors.filter((e) => e.sharesSession).length,
          }
        : {}),
    },
    "onnx model loaded",
  );
  return { io, executors, checkInputs: checkOnnxInputs };
}
