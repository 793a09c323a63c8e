import type { DynamicBatchingConfig, QueuePolicyConfig } from "../../core/model-config.ts";
import type { MessageNode } from "./config-node.ts";

// The dynamic batcher of stateless models, with Triton's default (preferred batch size =
// max_batch_size) and Triton's checks: its priority levels, each with its queue policy
// (its own, or the default one), as the batcher's priority queue applies them.

/** Triton's preferred-batch-size checks, shared with the Oldest sequence strategy. */
export function preferredBatchSizes(node: MessageNode, maxBatchSize: number, what: string): number[] {
  if (node.list("preferred_batch_size").length === 0 && maxBatchSize > 0) {
    node.set("preferred_batch_size", [maxBatchSize]);
  }
  const modelName = node.ctx.modelName;
  const sizes = node.list("preferred_batch_size") as number[];
  sizes.forEach((size, i) => {
    if (size <= 0)
      node.failItem("preferred_batch_size", i, `${what} must be positive for model '${modelName}'`);
    if (size > maxBatchSize) {
      node.failItem(
        "preferred_batch_size",
        i,
        `${what} ${size} must be <= max batch size ${maxBatchSize} for model '${modelName}'`,
      );
    }
  });
  return sizes;
}

export function resolveDynamicBatching(root: MessageNode): DynamicBatchingConfig | undefined {
  const batching = root.child("dynamic_batching");
  if (batching === undefined) return undefined;
  const modelName = root.ctx.modelName;
  const maxBatchSize = root.number("max_batch_size");
  if (maxBatchSize === 0)
    root.ctx.note(`dynamic batching of model '${modelName}' cannot batch: max_batch_size is 0`);
  const preferred = preferredBatchSizes(batching, maxBatchSize, "dynamic batching preferred size");

  const levels = batching.safeNumber("priority_levels");
  if (levels !== 0) {
    const defaultLevel = batching.safeNumber("default_priority_level");
    if (defaultLevel === 0 || defaultLevel > levels) {
      batching.fail(
        "default_priority_level",
        `default priority level must be in range [1, ${levels}] for model '${modelName}'`,
      );
    }
    for (const key of Object.keys(batching.map("priority_queue_policy"))) {
      const level = Number(key);
      if (level === 0 || level > levels) {
        batching.fail(
          "priority_queue_policy",
          `priority queue policy must have priority level in range [1, ${levels}] for model '${modelName}'`,
        );
      }
    }
  }

  const preserveOrdering = batching.bool("preserve_ordering");
  const defaultPolicy = batching.child("default_queue_policy");
  const policies = [
    defaultPolicy,
    ...Object.keys(batching.map("priority_queue_policy")).map((key) =>
      batching.child("priority_queue_policy")?.child(key),
    ),
  ];
  for (const policy of policies) {
    if (policy === undefined) continue;
    const delays =
      policy.string("timeout_action", "REJECT") === "DELAY" &&
      policy.safeNumber("default_timeout_microseconds") !== 0;
    if (preserveOrdering && delays) {
      policy.fail(
        "timeout_action",
        `Queue policy can not have DELAY as timeout action when 'preserve_ordering' is true for model '${modelName}'`,
      );
    }
  }
  if (preserveOrdering && levels > 1) {
    batching.fail(
      "preserve_ordering",
      `Only one priority level is allowed when 'preserve_ordering' is true for model '${modelName}'`,
    );
  }

  return {
    preferredBatchSizes: preferred,
    maxQueueDelayUs: batching.safeNumber("max_queue_delay_microseconds"),
    preserveOrdering,
    priorityLevels: levels,
    defaultPriorityLevel: levels === 0 ? 0 : batching.safeNumber("default_priority_level"),
    defaultQueuePolicy: queuePolicy(defaultPolicy),
    priorityQueuePolicies: new Map(
      Object.keys(batching.map("priority_queue_policy")).map((key) => [
        Number(key),
        queuePolicy(batching.child("priority_queue_policy")?.child(key)),
      ]),
    ),
  };
}

function queuePolicy(policy: MessageNode | undefined): QueuePolicyConfig {
  const timeoutUs = policy?.safeNumber("default_timeout_microseconds") ?? 0;
  return {
    maxQueueSize: policy?.number("max_queue_size") ?? 0,
    ...(timeoutUs === 0
      ? {}
      : {
          timeout: {
            defaultUs: timeoutUs,
            allowOverride: policy?.bool("allow_timeout_override") ?? false,
            action: policy?.string("timeout_action", "REJECT") === "DELAY" ? "DELAY" : "REJECT",
          },
        }),
  };
}
