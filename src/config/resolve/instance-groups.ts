import type { InstanceGroupConfig, InstanceKind } from "../../core/model-config.ts";
import type { MessageNode } from "./config-node.ts";
import { ONNX_BACKEND } from "./model-identity.ts";

// How many instances of the model run, in groups. seqserve runs every instance on the
// CPU (one onnxruntime session per worker thread): KIND_AUTO resolves to KIND_CPU as it
// does in Triton on a machine without GPUs, and KIND_GPU is accepted but run on the CPU,
// with Triton's count per listed GPU.
// Without any group there is one group, named after the model. A group without a count
// gets Triton's default (SetDefaultInstanceCount): 2 on the CPU for ONNX Runtime's backend,
// 1 otherwise (the stateful backend, model code, a KIND_GPU group). The count matters
// beyond speed: a sequence model has max_batch_size slots per instance.

/** Triton's count of a CPU group of ONNX Runtime's backend that gives none. */
const DEFAULT_ONNX_CPU_COUNT = 2;

export function resolveInstanceGroups(root: MessageNode, backend: string): InstanceGroupConfig[] {
  const modelName = root.string("name");
  if (root.children("instance_group").length === 0) {
    root.set("instance_group", [{ name: modelName }]);
  }
  const names = new Set<string>();
  return root.children("instance_group").map((group, index) => {
    if (group.string("name") === "") group.set("name", `${modelName}_${index}`);
    const name = group.string("name");
    if (names.has(name))
      group.fail("name", `instance group name '${name}' is used twice in model '${modelName}'`);
    names.add(name);

    let kind = group.string("kind", "KIND_AUTO") as InstanceKind;
    // A count below 1 means the default, as Triton normalises it (the field is an int32
    // that configs written for it leave at 0), for the kind resolved (AUTO is the CPU here).
    if (!group.has("count") || group.number("count") < 1) {
      const onCpu = kind === "KIND_AUTO" || kind === "KIND_CPU";
      group.set("count", onCpu && backend === ONNX_BACKEND ? DEFAULT_ONNX_CPU_COUNT : 1);
    }
    let count = group.number("count");

    if (kind === "KIND_AUTO" || kind === "KIND_GPU") {
      if (kind === "KIND_GPU") {
        // Triton starts `count` instances on each GPU the group lists: run here, the group
        // keeps them all, so the model has as many sequence slots and as much concurrency.
        const gpus = group.list("gpus").length;
        const perGpu =
          gpus > 1
            ? ` as ${count * gpus} instances (count ${count} on each of its ${gpus} GPUs, as in Triton)`
            : "";
        root.ctx.note(`instance group '${name}' asks for KIND_GPU; seqserve runs it on the CPU${perGpu}`);
        count *= Math.max(1, gpus);
        group.set("count", count);
      }
      kind = "KIND_CPU";
      group.set("kind", kind).set("gpus", []);
    }
    if (group.list("gpus").length > 0) {
      group.fail(
        "gpus",
        `instance group '${name}' of model '${modelName}' has kind ${kind} but specifies one or more GPUs`,
      );
    }
    if (group.list("profile").length > 0) {
      group.fail(
        "profile",
        `instance group '${name}' of model '${modelName}' specifies profile field which is only supported for TensorRT models`,
      );
    }
    if (group.bool("passive")) {
      group.fail(
        "passive",
        `instance group '${name}' of model '${modelName}' is passive, which seqserve does not support`,
      );
    }
    if (group.list("secondary_devices").length > 0) {
      root.ctx.note(`secondary devices of instance group '${name}' are ignored`);
    }
    return { name, count, kind };
  });
}
