import type { InstanceGroupConfig, InstanceKind } from "../../core/model-config.ts";
import type { MessageNode } from "./config-node.ts";

// How many instances of the model run, in groups. seqserve runs every instance on the
// CPU (one onnxruntime session per worker thread): KIND_AUTO resolves to KIND_CPU as it
// does in Triton on a machine without GPUs, and KIND_GPU is accepted but run on the CPU,
// with Triton's count per listed GPU.
// Without any group there is one group of one instance, named after the model.
// (Triton's default count for ONNX Runtime on CPU is 2; seqserve starts with 1 because
// each instance is a thread with its own copy of the model.)

const DEFAULT_COUNT = 1;

export function resolveInstanceGroups(root: MessageNode): InstanceGroupConfig[] {
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

    // A count below 1 means the default, as Triton normalises it (the field is an int32
    // that configs written for it leave at 0).
    if (!group.has("count") || group.number("count") < 1) group.set("count", DEFAULT_COUNT);
    let count = group.number("count");

    let kind = group.string("kind", "KIND_AUTO") as InstanceKind;
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
