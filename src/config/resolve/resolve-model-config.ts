import type { ModelConfig, SequenceBatchingConfig } from "../../core/model-config.ts";
import type { ModelIo } from "../../core/model-io.ts";
import { ConfigError } from "../config-error.ts";
import { deepFreeze } from "../deep-freeze.ts";
import {
  cloneParsed,
  type ParsedMessage,
  type ParsedModelConfig,
  SourceLocations,
} from "../parsed-config.ts";
import { toTritonJson } from "../triton-json.ts";
import { MessageNode, ResolveContext } from "./config-node.ts";
import { resolveDynamicBatching } from "./dynamic-batching.ts";
import { statePairsOfGraphDescription, statePairsText } from "./graph-description-pairs.ts";
import { resolveInstanceGroups } from "./instance-groups.ts";
import {
  completeIo,
  DEFAULT_MAX_BATCH_SIZE,
  type IoContext,
  resolveInputs,
  resolveOutputs,
} from "./io-config.ts";
import {
  resolveIdentity,
  resolveVersionPolicy,
  STATEFUL_BACKEND,
  TYPESCRIPT_BACKEND,
} from "./model-identity.ts";
import { ModelParameters } from "./model-parameters.ts";
import { resolveModelWarmup } from "./model-warmup.ts";
import { resolveSequenceBatching, sequenceTensorNames } from "./sequence-batching.ts";

// From a parsed config (and what the model file declares) to the frozen core ModelConfig,
// applying Triton's defaults and checks once, in Triton's order: name, platform and
// files; completion from the model (not in strict mode); normalisation (version policy,
// preferred batch sizes, idle timeout, instance groups, pinned memory); validation.
// The completed config is also rendered as Triton prints it.

export interface ResolveModelConfigOptions {
  /** The parsed config.pbtxt / config.json; undefined when the model has none. */
  readonly parsed: ParsedModelConfig | undefined;
  /** The model's directory name, which is its name. */
  readonly modelName: string;
  /** The model's directory (for initial_state files). */
  readonly modelDir: string;
  /** What the model file declares; undefined when it has not been opened. */
  readonly modelIo?: ModelIo | undefined;
  /** Triton's --disable-auto-complete-config: nothing is completed from the model file. */
  readonly strict?: boolean;
  /** max_batch_size autocomplete gives a model that can batch (Triton's --backend-config default-max-batch-size). */
  readonly defaultMaxBatchSize?: number;
}

export interface ResolvedModelConfig {
  readonly config: ModelConfig;
  /** The effective config as Triton's HTTP `/config` endpoint prints it. */
  readonly tritonJson: Readonly<Record<string, unknown>>;
  /** The effective config in parsed form (for `toTritonJson` with other options). */
  readonly completed: Readonly<ParsedMessage>;
  /** Settings accepted but not acted on, worth a line in the log. */
  readonly notes: readonly string[];
}

function refuseUnsupported(root: MessageNode): void {
  const { ctx } = root;
  const modelName = ctx.modelName;
  if (root.has("ensemble_scheduling")) {
    root.fail(
      "ensemble_scheduling",
      `ensemble scheduling (model '${modelName}') is not supported by seqserve`,
    );
  }
  for (const field of ["batch_input", "batch_output"]) {
    if (root.list(field).length > 0)
      root.failItem(field, 0, `${field} (model '${modelName}') is not supported by seqserve`);
  }
  const modelCode = root.string("backend") === TYPESCRIPT_BACKEND;
  if (!modelCode && root.child("model_transaction_policy")?.bool("decoupled") === true) {
    root
      .child("model_transaction_policy")
      ?.fail(
        "decoupled",
        `model '${modelName}' is decoupled, which the ONNX Runtime backend does not support (model code, backend '${TYPESCRIPT_BACKEND}', may be decoupled)`,
      );
  }
  if ((root.child("model_operations")?.list("op_library_filename").length ?? 0) > 0) {
    root
      .child("model_operations")
      ?.fail(
        "op_library_filename",
        `custom operation libraries (model '${modelName}') are not supported by seqserve`,
      );
  }
  if (root.has("max_batch_size") && root.number("max_batch_size") < 0) {
    root.fail("max_batch_size", `'max_batch_size' must be non-negative value for model '${modelName}'`);
  }
  if (root.number("max_batch_size") > 0) {
    for (const input of root.children("input")) {
      const name = input.string("name");
      // Requests are batched only when their shapes match; a ragged batch's concatenated
      // input would reach the model in a form it was not written for.
      if (input.bool("allow_ragged_batch"))
        input.fail(
          "allow_ragged_batch",
          `input '${name}' of model '${modelName}' allows ragged batches, which seqserve does not support`,
        );
      // ONNX Runtime's backend refuses these: a batch could mix requests that carry the
      // input with requests that do not.
      if (!modelCode && input.bool("optional"))
        input.fail("optional", `optional input '${name}' is not supported for models that support batching`);
    }
  }

  // Samples are run on ONNX models without sequence batching (model-warmup-run.ts): model
  // code and sequence models (whose state inputs Triton fills in) load without them.
  if (root.list("model_warmup").length > 0 && (modelCode || root.has("sequence_batching")))
    ctx.note(
      `model_warmup samples of model '${modelName}' are not run: seqserve runs them on ONNX models without sequence batching`,
    );
  if ((root.child("model_repository_agents")?.list("agents").length ?? 0) > 0) {
    ctx.note(`repository agents of model '${modelName}' are not run`);
  }
  if (Object.keys(root.map("cc_model_filenames")).length > 0)
    ctx.note(`cc_model_filenames of model '${modelName}' are ignored`);
  if ((root.child("model_metrics")?.list("metric_control").length ?? 0) > 0) {
    ctx.note(`model_metrics of model '${modelName}' are not applied: the histograms keep their buckets`);
  }
  if (root.child("response_cache")?.bool("enable") === true) {
    ctx.note(`the response cache of model '${modelName}' is not supported and stays off`);
  }
  const optimization = root.child("optimization");
  const accelerators = optimization?.child("execution_accelerators");
  const names = [
    ...(accelerators?.children("gpu_execution_accelerator") ?? []),
    ...(accelerators?.children("cpu_execution_accelerator") ?? []),
  ].map((a) => a.string("name"));
  if (names.length > 0) {
    ctx.note(
      `execution accelerators ${names.map((n) => `'${n}'`).join(", ")} of model '${modelName}' are not used: seqserve runs ONNX Runtime on the CPU`,
    );
  }
  if (optimization?.has("cuda") === true) ctx.note(`CUDA settings of model '${modelName}' are ignored`);
}

/** Triton's normalisation of `optimization`: pinned memory buffers default to enabled. */
function normalizeOptimization(root: MessageNode): void {
  const optimization = root.ensureChild("optimization");
  for (const field of ["input_pinned_memory", "output_pinned_memory"]) {
    if (!optimization.has(field)) optimization.set(field, { enable: true });
  }
}

/**
 * Model code is given each request's sequence (id, flags, its own state) directly: it
 * has no control tensors or implicit state to be fed.
 */
function checkModelCodeSequencing(root: MessageNode, sequencing: SequenceBatchingConfig | undefined): void {
  if (sequencing === undefined) return;
  const modelName = root.ctx.modelName;
  const node = root.child("sequence_batching")!;
  if (sequencing.states.length > 0) {
    node.fail(
      "state",
      `model '${modelName}' is model code (backend '${TYPESCRIPT_BACKEND}'): it keeps its state in request.sequence.state, not in implicit state tensors`,
    );
  }
  if (sequencing.controlInputs.length > 0) {
    node.fail(
      "control_input",
      `model '${modelName}' is model code (backend '${TYPESCRIPT_BACKEND}'): it reads request.sequence (id, start, end) rather than control tensors`,
    );
  }
}

/** Every model input must get a value: from the request, or from the sequence batcher. */
function checkInputsFed(root: MessageNode, modelIo: ModelIo, fed: ReadonlySet<string>): void {
  for (const tensor of modelIo.inputs) {
    if (!fed.has(tensor.name)) {
      root.fail(
        "input",
        `input '${tensor.name}' of model '${root.ctx.modelName}' is given no value: list it in 'input', ` +
          "or feed it as a sequence control or state",
      );
    }
  }
}

export function resolveModelConfig(options: ResolveModelConfigOptions): ResolvedModelConfig {
  const { parsed, modelName, modelDir, modelIo } = options;
  const strict = options.strict ?? false;
  if (parsed === undefined && strict) {
    throw new ConfigError(
      modelDir,
      undefined,
      `model '${modelName}' has no configuration file, which strict mode requires`,
    );
  }
  const locations = parsed?.locations ?? new SourceLocations();
  const message: ParsedMessage = parsed === undefined ? {} : cloneParsed(parsed.message, locations);
  const ctx = new ResolveContext(parsed?.file ?? modelDir, locations, modelName);
  const root = new MessageNode(ctx, message, "");

  const identity = resolveIdentity(root);
  const versionPolicy = resolveVersionPolicy(root);
  refuseUnsupported(root);

  const statefulBackend = identity.backend === STATEFUL_BACKEND;
  const graphPairs =
    statefulBackend && modelIo?.graphDescription !== undefined
      ? statePairsOfGraphDescription(modelIo.graphDescription)
      : [];
  const params = new ModelParameters(root, graphPairs);
  if (graphPairs.length > 0 && !params.namesStatePairs && root.has("sequence_batching")) {
    ctx.note(
      `model '${modelName}' names no state_pairs: its state pairs ${statePairsText(graphPairs)} are read from the ONNX graph's description, as the stateful backend reads them`,
    );
  }
  const sequenceNames = sequenceTensorNames(root, params, modelIo, statefulBackend);
  const declaredShared = new Set(params.names("shared_inputs"));
  const io: IoContext = {
    root,
    modelIo,
    strict,
    sequenceInputs: new Set([...sequenceNames.controls, ...sequenceNames.stateInputs]),
    stateOutputs: sequenceNames.stateOutputs,
    statePairTensors: sequenceNames.pairedTensors,
    declaredShared,
    batchMarkedInDims: statefulBackend,
    defaultMaxBatchSize: options.defaultMaxBatchSize ?? DEFAULT_MAX_BATCH_SIZE,
  };
  completeIo(io);
  if (!root.has("max_batch_size")) root.set("max_batch_size", 0);
  const maxBatchSize = root.number("max_batch_size");

  const inputNames = new Set(root.children("input").map((input) => input.string("name")));
  for (const name of declaredShared) {
    if (!inputNames.has(name)) {
      params.fail(
        "shared_inputs",
        `parameter 'shared_inputs' names '${name}', which is not an input of model '${modelName}'`,
      );
    }
  }
  const inputs = resolveInputs(io);
  const outputs = resolveOutputs(io);
  const instanceGroups = resolveInstanceGroups(root, identity.backend);
  const dynamicBatching = resolveDynamicBatching(root);
  const sequenceBatching = resolveSequenceBatching({
    root,
    params,
    modelIo,
    inputNames,
    modelDir,
    backend: identity.backend,
    instanceCount: instanceGroups.reduce((sum, group) => sum + group.count, 0),
  });
  if (identity.backend === TYPESCRIPT_BACKEND) checkModelCodeSequencing(root, sequenceBatching);
  if (statefulBackend && sequenceBatching === undefined) {
    root.fail(
      "backend",
      `backend 'stateful' keeps the state of sequences: model '${modelName}' needs a sequence_batching section`,
    );
  }
  // The backend refuses such a model too ("Could not find any state tensors").
  if (statefulBackend && modelIo !== undefined && sequenceBatching?.states.length === 0) {
    root.fail(
      "backend",
      `backend 'stateful' found no state tensors for model '${modelName}': name them with parameter 'state_pairs' ("<<<state_input, state_output>>> ...") or in the ONNX graph's description`,
    );
  }
  if (modelIo !== undefined) {
    const fed = new Set([
      ...inputNames,
      ...(sequenceBatching?.controlInputs.map((c) => c.name) ?? []),
      ...(sequenceBatching?.states.map((s) => s.inputName) ?? []),
    ]);
    checkInputsFed(root, modelIo, fed);
  }
  normalizeOptimization(root);

  const config: ModelConfig = {
    name: identity.name,
    platform: identity.platform,
    backend: identity.backend,
    versionPolicy,
    maxBatchSize,
    inputs,
    outputs,
    instanceGroups,
    defaultModelFilename: identity.defaultModelFilename,
    ...(dynamicBatching === undefined ? {} : { dynamicBatching }),
    ...(sequenceBatching === undefined ? {} : { sequenceBatching }),
    parameters: { ...params.values },
    ...(identity.backend === TYPESCRIPT_BACKEND
      ? { decoupled: root.child("model_transaction_policy")?.bool("decoupled") === true }
      : {}),
    warmup: resolveModelWarmup(root, modelDir),
  };
  return deepFreeze({
    config,
    tritonJson: toTritonJson(message),
    completed: message,
    notes: [...ctx.notes],
  });
}
