import type { InstanceGroupConfig, VersionPolicy } from "../core/model-config.ts";
import { deepFreeze } from "./deep-freeze.ts";
import { cloneParsed, type ParsedMessage, type ParsedModelConfig, SourceLocations } from "./parsed-config.ts";
import { MessageNode, ResolveContext } from "./resolve/config-node.ts";
import { resolveInstanceGroups } from "./resolve/instance-groups.ts";
import { resolveIdentity, resolveVersionPolicy } from "./resolve/model-identity.ts";
import { ModelParameters } from "./resolve/model-parameters.ts";

// What the loader needs before it opens the model file (and so before the config can be
// resolved completely, since completion needs the model's inputs and outputs): which
// file, which versions, how many instances, and the session settings.

/** ONNX Runtime's graph optimization levels, as onnxruntime-node names them. */
type GraphOptimization = "disabled" | "basic" | "extended" | "all";

export interface LoadSettings {
  readonly name: string;
  /** "onnxruntime", or "stateful" for the ONNX stateful backend. */
  readonly backend: string;
  readonly defaultModelFilename: string;
  readonly versionPolicy: VersionPolicy;
  readonly instanceGroups: readonly InstanceGroupConfig[];
  /** Total instances (worker threads) to start. */
  readonly instanceCount: number;
  /** optimization.graph.level as written (-1 basic, 0 default, 1 extended, 2 disabled); undefined when unset. */
  readonly graphOptimizationLevel: number | undefined;
  /** The level for onnxruntime's session options, mapped as Triton's ONNX Runtime backend maps it. */
  readonly graphOptimization: GraphOptimization;
  readonly parameters: Readonly<Record<string, string>>;
}

function graphOptimizationOf(level: number | undefined): GraphOptimization {
  if (level === -1) return "basic";
  if (level === 1) return "extended";
  if (level === 2) return "disabled";
  return "all";
}

/** Reads the load settings of a model from its parsed config (undefined: no config file). */
export function readLoadSettings(
  parsed: ParsedModelConfig | undefined,
  modelName: string,
  modelDir: string,
): LoadSettings {
  const locations = parsed?.locations ?? new SourceLocations();
  const message: ParsedMessage = parsed === undefined ? {} : cloneParsed(parsed.message, locations);
  const root = new MessageNode(
    new ResolveContext(parsed?.file ?? modelDir, locations, modelName),
    message,
    "",
  );
  const identity = resolveIdentity(root);
  const versionPolicy = resolveVersionPolicy(root);
  const instanceGroups = resolveInstanceGroups(root, identity.backend);
  const graph = root.child("optimization")?.child("graph");
  const graphOptimizationLevel = graph === undefined ? undefined : graph.number("level");
  return deepFreeze({
    name: identity.name,
    backend: identity.backend,
    defaultModelFilename: identity.defaultModelFilename,
    versionPolicy,
    instanceGroups,
    instanceCount: Math.max(
      1,
      instanceGroups.reduce((sum, group) => sum + group.count, 0),
    ),
    graphOptimizationLevel,
    graphOptimization: graphOptimizationOf(graphOptimizationLevel),
    parameters: { ...new ModelParameters(root).values },
  });
}
