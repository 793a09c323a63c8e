import { stat } from "node:fs/promises";
import { invalidArg, ServerError } from "../../core/errors.ts";

// What every worker-hosted backend does to open a model: check the instance count and the
// file, start one worker per instance (named as Triton names instances: `<model>_0`, …),
// and either have them all loaded or none left running.

export interface WorkerInstance<Loaded> {
  start(): Promise<Loaded>;
  close(): Promise<void>;
}

export async function checkModelFile(
  modelName: string,
  modelPath: string,
  instanceCount: number,
): Promise<void> {
  if (!Number.isInteger(instanceCount) || instanceCount < 1) {
    throw invalidArg(`model '${modelName}' needs at least one instance, got ${instanceCount}`);
  }
  const isFile = await stat(modelPath).then(
    (s) => s.isFile(),
    () => false,
  );
  if (!isFile) throw new ServerError("UNAVAILABLE", `unable to find '${modelPath}' for model '${modelName}'`);
}

/**
 * Starts `count` instances made by `create(name)`; resolves with them and what the first
 * one loaded, or rejects with the first failure after closing them all.
 */
export async function startInstances<Instance extends WorkerInstance<unknown>>(
  modelName: string,
  count: number,
  create: (name: string) => Instance,
): Promise<{ instances: Instance[]; loaded: Awaited<ReturnType<Instance["start"]>> }> {
  const instances = Array.from({ length: count }, (_, i) => create(`${modelName}_${i}`));
  const loads = await Promise.allSettled(instances.map((instance) => instance.start()));
  const failed = loads.find((load) => load.status === "rejected");
  if (failed !== undefined) {
    await Promise.all(instances.map((instance) => instance.close()));
    throw failed.reason;
  }
  const first = loads[0] as PromiseFulfilledResult<Awaited<ReturnType<Instance["start"]>>>;
  return { instances, loaded: first.value };
}
