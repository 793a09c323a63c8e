import { existsSync, readFileSync, statSync } from "node:fs";
import { basename, dirname, join } from "node:path";
import {
  findSharedInputs,
  findStatePairs,
  handlerFile,
  type LoadSettings,
  type OvmsToParsedOptions,
  type ParsedModelConfig,
  parseModelConfigFile,
  parseModelConfigText,
  readLoadSettings,
  resolveModelConfig,
  TYPESCRIPT_BACKEND,
  withModelCodeBackend,
} from "../config/index.ts";
import { readMappingConfig, type TensorNameMapping } from "../config/ovms-mapping-config.ts";
import { fileInFolder } from "../config/resolve/file-in-folder.ts";
import type { ModelBackend, OpenedModel } from "../core/backend.ts";
import { invalidArg, unavailable } from "../core/errors.ts";
import { LoadedModel } from "../core/loaded-model.ts";
import type { ModelConfig } from "../core/model-config.ts";
import type { ModelIo } from "../core/model-io.ts";
import type { Refusals } from "../core/refusals.ts";
import type { QueueBudget } from "../core/scheduler/queue-budget.ts";
import type { RequestObserver, RequestObserverFactory } from "../core/scheduler/request-observer.ts";
import type { SequenceTier } from "../core/sequence/sequence-tier.ts";
import { stateSignature } from "../core/sequence/sequence-transfer.ts";
import type { StateBudget } from "../core/sequence/state-budget.ts";
import type { Logger } from "../observability/logger.ts";
import { modelRunnerLog } from "../observability/model-runner-log.ts";
import {
  sharedInputsInClientNames,
  statePairsInClientNames,
  withClientNames,
} from "./client-tensor-names.ts";
import type { ModelSource } from "./model-source.ts";
import { runWarmup } from "./model-warmup-run.ts";
import { ovmsModelFile } from "./ovms-model-file.ts";
import { versionPath } from "./version-folders.ts";

// Turning a model folder into loaded versions: read its config (or the one a load request
// carries), learn from it which file and how many instances, open the file through the
// backend, complete and validate the config against what the file declares, and build the
// LoadedModel with the scheduler the config asks for.

const CONFIG_FILES = ["config.pbtxt", "config.json"];

/** The config file of a model folder: `configs/<configName>.pbtxt` when named and present (Triton's --model-config-name), else the usual ones. */
function configFile(dir: string, configName: string | undefined): string | undefined {
  const custom = configName === undefined ? undefined : join(dir, "configs", `${configName}.pbtxt`);
  if (custom !== undefined && existsSync(custom)) return custom;
  return CONFIG_FILES.map((f) => join(dir, f)).find((f) => existsSync(f));
}

export interface PreparedModel {
  readonly source: ModelSource;
  readonly parsed: ParsedModelConfig | undefined;
  readonly settings: LoadSettings;
  readonly strict: boolean;
  /** How entries of OVMS config files become model configs (server-wide settings). */
  readonly ovms: OvmsToParsedOptions;
}

/** A load request's `config` (Triton's JSON form), read before the load begins. */
export function parseConfigOverride(model: string, text: string): ParsedModelConfig {
  return parseModelConfigText(text, { file: `the load request's config for '${model}'`, format: "json" });
}

export async function prepareModel(
  source: ModelSource,
  configOverride: ParsedModelConfig | undefined,
  strict: boolean,
  ovms: OvmsToParsedOptions = {},
  configName?: string,
): Promise<PreparedModel> {
  let parsed: ParsedModelConfig | undefined;
  if (configOverride !== undefined) {
    parsed = configOverride;
  } else if (source.ovms !== undefined) {
    parsed = source.ovms.entry.toParsedConfig(ovms);
  } else {
    const file = configFile(source.dir, configName);
    if (file !== undefined) {
      parsed = await parseModelConfigFile(file);
      // Read afresh for this load: the name it is served under replaces the folder's own.
      if (source.renamed === true) parsed.message.name = source.name;
    } else if (strict) {
      throw invalidArg(
        `model '${source.name}' has no config.pbtxt or config.json, and --strict-model-config is set`,
      );
    }
  }
  parsed = withModelCodeBackend(
    parsed,
    source.dir,
    source.ovms !== undefined && configOverride === undefined,
  );
  return { source, parsed, settings: readLoadSettings(parsed, source.name, source.dir), strict, ovms };
}

/**
 * Each instance is a worker thread with its own copy of the model: a count without bound
 * (in a config file, or a load request's override) would start threads until the process
 * runs out of memory. Checked before anything is opened.
 */
export function checkInstanceCount(
  prepared: PreparedModel,
  maxInstances: number | undefined,
  refusals: Refusals | undefined,
): void {
  const count = prepared.settings.instanceCount;
  if (maxInstances === undefined || count <= maxInstances) return;
  refusals?.refused("instances_per_model");
  throw invalidArg(
    `model '${prepared.source.name}' asks for ${count} instances in its instance_group, more than the ${maxInstances} a model version may have (--max-instances-per-model)`,
  );
}

/**
 * A stateful OVMS entry gets the state pairs and shared inputs its model file shows
 * (config/ovms-from-model.ts) when it names none, or a clear refusal when the file does
 * not show the state.
 */
function withFoundStatePairs(
  prepared: PreparedModel,
  io: ModelIo | undefined,
  mapping: TensorNameMapping | undefined,
): ParsedModelConfig | undefined {
  const entry = prepared.source.ovms?.entry;
  // Model code keeps its state itself: it has no state pairs to find.
  if (
    entry === undefined ||
    !entry.stateful ||
    io === undefined ||
    prepared.settings.backend === TYPESCRIPT_BACKEND
  )
    return prepared.parsed;
  let statePairs = entry.statePairs;
  if (statePairs === undefined) {
    const search = findStatePairs(entry.name, io);
    if (search.pairs === undefined) throw invalidArg(search.problem ?? "");
    statePairs = search.pairs;
  }
  let sharedInputs = entry.sharedInputs ?? findSharedInputs(io);
  // Found, or named, by the model's own names: the config holds those its clients see.
  if (mapping !== undefined) {
    statePairs = statePairsInClientNames(statePairs, mapping);
    if (sharedInputs !== undefined) sharedInputs = sharedInputsInClientNames(sharedInputs, mapping);
  }
  return entry.toParsedConfig({
    ...prepared.ovms,
    statePairs,
    ...(sharedInputs === undefined ? {} : { sharedInputs }),
  });
}

/**
 * max_batch_size autocomplete gives a model an OVMS config lists, when the model can
 * batch. OVMS takes a request of any batch size a model's dynamic first dimension
 * allows, where Triton's default (4) would refuse a fifth row; the largest Triton allows
 * is as good as no limit. Requests are still batched together, and a stateful model's
 * sequences as many at once as are ready.
 */
const OVMS_MAX_BATCH_SIZE = 2 ** 31 - 1;

export interface VersionLoadOptions {
  readonly backend: ModelBackend;
  readonly logger: Logger;
  /** max_batch_size autocomplete gives a batchable model (--backend-config default-max-batch-size). */
  readonly defaultMaxBatchSize: number;
  readonly observeRequests?: RequestObserverFactory;
  /** Where sequence models keep their state beside memory, shared with other replicas (--state-store). */
  readonly sequenceTier?: SequenceTier | undefined;
  /** Longest string sequence id, in bytes; undefined = no limit. */
  readonly maxSequenceIdBytes?: number;
  readonly refusals?: Refusals;
  readonly stateBudget?: StateBudget;
  readonly queueBudget?: QueueBudget;
}

export async function openVersion(
  prepared: PreparedModel,
  version: number,
  options: VersionLoadOptions,
): Promise<{ model: LoadedModel; configJson: Record<string, unknown> }> {
  const { source, settings } = prepared;
  const startedMs = performance.now();
  const modelPath = versionModelFile(prepared, version, options.logger);
  const mapping = tensorMapping(prepared, version, dirname(modelPath), options.logger);
  const opened = await options.backend.open({
    modelName: source.name,
    modelPath,
    backendName: settings.backend,
    version: String(version),
    instanceCount: settings.instanceCount,
    parameters: settings.parameters,
    graphOptimizationLevel: settings.graphOptimizationLevel,
  });
  let requestObserver: RequestObserver | undefined;
  try {
    const served = servedUnderMapping(source.name, version, opened, mapping, options.logger);
    const resolved = resolveModelConfig({
      parsed: withFoundStatePairs(prepared, opened.io, mapping),
      modelName: source.name,
      modelDir: source.dir,
      modelIo: served.io,
      strict: prepared.strict,
      defaultMaxBatchSize: source.ovms === undefined ? options.defaultMaxBatchSize : OVMS_MAX_BATCH_SIZE,
    });
    for (const note of resolved.notes)
      options.logger.info({ event: "config_note", model: source.name }, note);
    const logger = options.logger;
    const sequencing = resolved.config.sequenceBatching;
    const observer =
      sequencing === undefined ? undefined : modelRunnerLog(source.name, sequencing.logging, logger);
    const labels = readLabels(source.dir, resolved.config);
    await runWarmup(resolved.config, served.executors, logger);
    requestObserver = options.observeRequests?.(source.name, String(version));
    const model = new LoadedModel({
      config: resolved.config,
      ...(labels.size === 0 ? {} : { labels }),
      version: String(version),
      executors: served.executors,
      ...(served.checkInputs === undefined ? {} : { checkInputs: served.checkInputs }),
      warn: (message) => logger.warn({ event: "sequence", model: source.name }, message),
      info: (message) => logger.info({ event: "sequence", model: source.name }, message),
      ...(options.maxSequenceIdBytes === undefined ? {} : { maxSequenceIdBytes: options.maxSequenceIdBytes }),
      ...(options.refusals === undefined ? {} : { refusals: options.refusals }),
      ...(options.stateBudget === undefined ? {} : { stateBudget: options.stateBudget }),
      ...(options.queueBudget === undefined ? {} : { queueBudget: options.queueBudget }),
      ...(observer === undefined ? {} : { observer }),
      requestObserver,
      ...(sequencing === undefined || options.sequenceTier === undefined
        ? {}
        : {
            // Registered with its state signature: a replica serving another version of
            // the model can then take over this one's sequences, or say where they are.
            tier: options.sequenceTier.forModel(source.name, String(version), stateSignature(sequencing)),
          }),
      // From its file to ready, its warmup included, as Triton times a load.
      loadSeconds: (performance.now() - startedMs) / 1000,
    });
    return { model, configJson: resolved.tritonJson as Record<string, unknown> };
  } catch (error) {
    requestObserver?.close?.();
    await Promise.all(opened.executors.map((e) => e.close()));
    throw error;
  }
}

/**
 * The file a version is opened from: model code's handler file; an OVMS model's `.onnx`
 * file, whatever its name (ovms-model-file.ts); else Triton's `default_model_filename`.
 */
function versionModelFile(prepared: PreparedModel, version: number, logger: Logger): string {
  const { source, settings } = prepared;
  let modelPath = versionPath(source.dir, version, settings.defaultModelFilename);
  if (settings.backend === TYPESCRIPT_BACKEND)
    modelPath = handlerFile(dirname(modelPath), settings.defaultModelFilename);
  else if (source.ovms !== undefined) {
    const file = ovmsModelFile(source.name, version, dirname(modelPath));
    if (file.passedOver.length > 0) {
      logger.warn(
        { event: "model_file", model: source.name, version, file: file.path, passedOver: file.passedOver },
        `model '${source.name}' version ${version}: its folder holds ${file.passedOver.length + 1} .onnx files; serving '${basename(file.path)}', the first in sorted order`,
      );
    }
    return file.path;
  }
  // Triton's ONNX layout for a model with external data (over 2 GB): `model.onnx` is a
  // folder holding `model.onnx` and the data files it names.
  else if (isDirectory(modelPath)) modelPath = join(modelPath, "model.onnx");
  if (!existsSync(modelPath)) {
    throw unavailable(`model '${source.name}' version ${version}: file '${modelPath}' not found`);
  }
  return modelPath;
}

/**
 * An OVMS model version's mapping_config.json (config/ovms-mapping-config.ts); one that is
 * not valid is logged, and the model keeps its own names, as OVMS goes on loading it.
 */
function tensorMapping(
  prepared: PreparedModel,
  version: number,
  versionDir: string,
  logger: Logger,
): TensorNameMapping | undefined {
  const { source, settings } = prepared;
  // Model code names its tensors itself; Triton's repositories have no such file.
  if (source.ovms === undefined || settings.backend === TYPESCRIPT_BACKEND) return undefined;
  const read = readMappingConfig(versionDir);
  if (read.problem !== undefined) {
    logger.error(
      { event: "mapping_config", model: source.name, version },
      `model '${source.name}' version ${version}: ${read.problem}; its inputs and outputs keep the model's names`,
    );
  }
  return read.mapping;
}

/** The opened model as its clients see it: under its mapping's names, when it has one. */
function servedUnderMapping(
  modelName: string,
  version: number,
  opened: OpenedModel,
  mapping: TensorNameMapping | undefined,
  logger: Logger,
): OpenedModel {
  if (mapping === undefined || opened.io === undefined) return opened;
  const { opened: served, unknown } = withClientNames(modelName, { ...opened, io: opened.io }, mapping);
  if (unknown.length > 0) {
    logger.warn(
      { event: "mapping_config", model: modelName, version },
      `model '${modelName}' version ${version}: '${mapping.file}' names ${unknown.join(", ")}, which the model does not have`,
    );
  }
  return served;
}

function isDirectory(path: string): boolean {
  try {
    return statSync(path).isDirectory();
  } catch {
    return false;
  }
}

/**
 * The class labels of each output whose config names a `label_filename`, read from the
 * model's folder as Triton reads them: one label per line. A file that cannot be read
 * fails the load, as Triton's label provider fails it (classification would answer
 * without labels).
 */
function readLabels(modelDir: string, config: ModelConfig): Map<string, string[]> {
  const labels = new Map<string, string[]>();
  for (const output of config.outputs) {
    if (output.labelFilename === undefined) continue;
    // Checked when the config was read; checked again where the file is read.
    const file = fileInFolder(modelDir, output.labelFilename);
    let text: string;
    try {
      if (file === undefined) throw Object.assign(new Error(), { code: "ENOENT" });
      text = readFileSync(file, "utf8");
    } catch (error) {
      // Named by its place in the model's folder: the server's own paths stay in its log.
      throw invalidArg(
        `failed to open text file for read '${output.labelFilename}' (the labels of output '${output.name}' of model '${config.name}'): ${systemErrorText(error)}`,
      );
    }
    const lines = text.split(/\r?\n/);
    if (lines.at(-1) === "") lines.pop();
    labels.set(output.name, lines);
  }
  return labels;
}

/** strerror's words for the errors a read meets, without Node's message (it holds the path). */
function systemErrorText(error: unknown): string {
  const code = (error as NodeJS.ErrnoException).code;
  switch (code) {
    case "ENOENT":
      return "No such file or directory";
    case "EACCES":
      return "Permission denied";
    case "EISDIR":
      return "Is a directory";
    default:
      return code ?? "unreadable";
  }
}
