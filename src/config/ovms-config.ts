import { statSync } from "node:fs";
import { readFile } from "node:fs/promises";
import { dirname, isAbsolute, join, resolve } from "node:path";
import type { VersionPolicy } from "../core/model-config.ts";
import { ConfigError, type SourcePosition } from "./config-error.ts";
import { deepFreeze } from "./deep-freeze.ts";
import { suggestion } from "./field-suggestion.ts";
import { describeJson, type JsonEntry, type JsonNode, jsonText, readJson } from "./json/json-reader.ts";
import { type ParsedMessage, type ParsedModelConfig, SourceLocations } from "./parsed-config.ts";
import type { SingleModelOptions } from "./server-options.ts";

// OpenVINO Model Server's config.json: `{"model_config_list": [{"config": {...}}]}`.
// Each entry names a model and its base path (version folders inside, relative paths
// from the config file's folder), a version policy and, for stateful models, OVMS's
// sequence settings. Keys OVMS documents are accepted (those about OpenVINO itself are
// kept but have no effect on ONNX models); unknown keys are refused. seqserve extensions:
// `state_pairs` (ONNX models must name their state tensors) and `shared_inputs`.
//
// An entry turns into the same parsed config a Triton config.pbtxt yields: a stateful
// model gets sequence batching with the Oldest strategy (OVMS serialises each sequence
// and batches nothing across them, Oldest is the closest that still batches), at most
// max_sequence_number live sequences and no backlog (OVMS refuses the next one at once),
// and an idle timeout from idle_sequence_cleanup.
//
// A `model_config_list` entry may also be a MediaPipe graph (OVMS's recommended place for
// them): OVMS takes an entry for a graph when its graph file is there (graph_path, by
// default graph.pbtxt, in base_path, by default the folder named as the entry beside the
// config file; or graph.pbtxt in base_path's folder 1), and for a model otherwise. seqserve
// serves no graphs: such an entry is left out with a warning, and the models served.

const DEFAULT_MAX_SEQUENCE_NUMBER = 500;
/** OVMS's sequence_cleaner_poll_wait_minutes default. */
const DEFAULT_SEQUENCE_CLEANER_POLL_MINUTES = 5;

const MODEL_KEYS = new Set([
  "name",
  "base_path",
  "batch_size",
  "model_version_policy",
  "shape",
  "layout",
  "nireq",
  "target_device",
  "plugin_config",
  "stateful",
  "idle_sequence_cleanup",
  "low_latency_transformation",
  "max_sequence_number",
  "allow_cache",
  "custom_loader_options",
  // A MediaPipe graph's (OVMS's schema allows them on any entry; a model ignores them).
  "graph_path",
  "subconfig",
  "state_pairs",
  "shared_inputs",
]);
const STATEFUL_ONLY_KEYS = [
  "max_sequence_number",
  "idle_sequence_cleanup",
  "low_latency_transformation",
] as const;
/** Keys OVMS applies to OpenVINO itself; ONNX models keep the model file's shapes and run on the CPU. */
const WITHOUT_EFFECT = ["batch_size", "shape", "layout", "nireq", "plugin_config", "allow_cache"] as const;
const UNSUPPORTED_LISTS = [
  "pipeline_config_list",
  "custom_loader_config_list",
  "custom_node_library_config_list",
  "mediapipe_config_list",
];
const TOP_LEVEL_KEYS = new Set(["model_config_list", "monitoring", ...UNSUPPORTED_LISTS]);

interface OvmsSequenceOptions {
  /** Live sequences at most; a new one beyond them is refused. */
  readonly maxSequenceNumber: number;
  /** Idle sequences are ended by the periodic sequence cleaner. */
  readonly idleSequenceCleanup: boolean;
  /** An OpenVINO transformation; accepted, without effect on ONNX models. */
  readonly lowLatencyTransformation: boolean;
}

export interface OvmsToParsedOptions {
  /** The server's sequence_cleaner_poll_wait_minutes (default 5; 0 disables the cleaner). */
  readonly sequenceCleanerPollWaitMinutes?: number;
  /** State pairs found from the model file (findStatePairs), for an entry that names none. */
  readonly statePairs?: string;
  /** Shared inputs found from the model file (findSharedInputs), for an entry that names none. */
  readonly sharedInputs?: string;
}

export interface OvmsModelEntry {
  readonly name: string;
  /** Absolute path of the folder holding the version folders. */
  readonly basePath: string;
  readonly versionPolicy: VersionPolicy;
  readonly stateful: boolean;
  /** Present for stateful models. */
  readonly sequence: OvmsSequenceOptions | undefined;
  readonly targetDevice: string;
  /** Accepted keys that have no effect in seqserve, for the log. */
  readonly notes: readonly string[];
  /** The entry's `config` as compact JSON: a changed text means a changed model. */
  readonly definition: string;
  /** `state_pairs` as given; undefined when the state is to be found from the model. */
  readonly statePairs: string | undefined;
  /** `shared_inputs` as given; undefined when they are to be found from the model. */
  readonly sharedInputs: string | undefined;
  /**
   * Why OVMS would not load this model, though the file is valid (a stateful model's key
   * on a stateless one…): the model is left out, the others are served, as in OVMS.
   */
  readonly invalid: ConfigError | undefined;
  /** The model as a parsed Triton config (what config.pbtxt would have given). */
  toParsedConfig(options?: OvmsToParsedOptions): ParsedModelConfig;
}

export interface OvmsConfig {
  readonly file: string;
  readonly models: readonly OvmsModelEntry[];
  /** What the file asks that seqserve does not serve (pipelines, custom nodes), for the log. */
  readonly notes: readonly string[];
}

type ObjectNode = Extract<JsonNode, { kind: "object" }>;

class OvmsReader {
  readonly #file: string;
  readonly #folder: string;

  constructor(file: string) {
    this.#file = file;
    this.#folder = dirname(resolve(file));
  }

  #error(position: SourcePosition, detail: string): ConfigError {
    return new ConfigError(this.#file, position, detail);
  }

  read(root: JsonNode): OvmsConfig {
    if (root.kind !== "object")
      throw this.#error(root.position, `the configuration must be an object, got ${describeJson(root)}`);
    let list: JsonEntry | undefined;
    const notes: string[] = [];
    for (const entry of root.entries) {
      if (!TOP_LEVEL_KEYS.has(entry.key)) {
        throw this.#error(
          entry.keyPosition,
          `unknown key '${entry.key}'${suggestion(entry.key, TOP_LEVEL_KEYS)}`,
        );
      }
      if (
        UNSUPPORTED_LISTS.includes(entry.key) &&
        !(entry.value.kind === "array" && entry.value.items.length === 0)
      ) {
        // OVMS serves them beside the models; here they are left out, and the models served.
        notes.push(
          `${this.#file}: '${entry.key}' is not supported by seqserve, which serves models, not pipelines or custom nodes: its entries are not served`,
        );
      }
      if (entry.key === "model_config_list") list = entry;
    }
    if (list === undefined)
      throw this.#error(root.position, "the configuration must have a 'model_config_list'");
    if (list.value.kind !== "array") {
      throw this.#error(
        list.value.position,
        `'model_config_list' must be a list, got ${describeJson(list.value)}`,
      );
    }
    const models: OvmsModelEntry[] = [];
    for (const item of list.value.items) {
      const model = this.#model(item, notes);
      if (model === undefined) continue;
      const earlier = models.find((m) => m.name === model.name);
      if (earlier !== undefined)
        throw this.#error(item.position, `model '${model.name}' is listed twice in 'model_config_list'`);
      models.push(model);
    }
    return deepFreeze({ file: this.#file, models, notes });
  }

  /** The entry's model; undefined for a MediaPipe graph, which is left out with a note. */
  #model(item: JsonNode, fileNotes: string[]): OvmsModelEntry | undefined {
    if (item.kind !== "object")
      throw this.#error(
        item.position,
        `a 'model_config_list' entry must be an object, got ${describeJson(item)}`,
      );
    for (const entry of item.entries) {
      if (entry.key !== "config") {
        throw this.#error(
          entry.keyPosition,
          `unknown key '${entry.key}' in a 'model_config_list' entry: it holds only 'config'`,
        );
      }
    }
    const configEntry = item.entries.find((e) => e.key === "config");
    if (configEntry === undefined)
      throw this.#error(item.position, "a 'model_config_list' entry must have a 'config'");
    const config = configEntry.value;
    if (config.kind !== "object")
      throw this.#error(config.position, `'config' must be an object, got ${describeJson(config)}`);

    const nameEntry = config.entries.find((e) => e.key === "name");
    if (nameEntry === undefined || nameEntry.value.kind !== "string" || nameEntry.value.value === "") {
      throw this.#error(
        nameEntry?.value.position ?? config.position,
        "a model config must have a non-empty string 'name'",
      );
    }
    const name = nameEntry.value.value;
    const keys = new Map<string, JsonEntry>();
    for (const entry of config.entries) {
      if (!MODEL_KEYS.has(entry.key)) {
        throw this.#error(
          entry.keyPosition,
          `unknown key '${entry.key}' in the config of model '${name}'${suggestion(entry.key, MODEL_KEYS)}`,
        );
      }
      if (keys.has(entry.key))
        throw this.#error(entry.keyPosition, `key '${entry.key}' of model '${name}' is given twice`);
      keys.set(entry.key, entry);
    }
    const fields = new EntryFields(this, name, config, keys);

    const givenPath = fields.string("base_path");
    const graphPath = fields.string("graph_path");
    fields.string("subconfig");
    const graph = this.#graph(name, givenPath, graphPath);
    if (graph.found !== undefined) {
      fileNotes.push(
        `${this.#file}: '${name}' in 'model_config_list' is a MediaPipe graph (${graph.found}), which seqserve does not serve: it is left out`,
      );
      return undefined;
    }
    // What OVMS checks per model, the file being valid: a model that fails them is not
    // loaded, and the others are.
    let invalid: ConfigError | undefined;
    // OVMS would read such a model's versions from the config file's own folder.
    const basePath = givenPath === undefined || givenPath === "" ? "." : givenPath;
    if (basePath === ".") {
      invalid ??= fields.error(
        "base_path",
        `model '${name}' must have a non-empty 'base_path' (nor is it a MediaPipe graph: there is no ${graph.looked.join(" nor ")})`,
      );
    }
    if (/^[a-z][a-z0-9+.-]*:\/\//i.test(basePath)) {
      invalid ??= fields.error(
        "base_path",
        `base_path '${basePath}' of model '${name}': cloud storage is not supported by seqserve`,
      );
    }
    if (keys.has("custom_loader_options")) {
      invalid ??= fields.error(
        "custom_loader_options",
        `custom loaders (model '${name}') are not supported by seqserve`,
      );
    }

    const stateful = fields.bool("stateful") ?? false;
    for (const key of STATEFUL_ONLY_KEYS) {
      if (keys.has(key) && !stateful) {
        invalid ??= fields.error(
          key,
          `key '${key}' of model '${name}' applies to stateful models only; set "stateful": true`,
        );
      }
    }
    const maxSequenceNumber = fields.integer("max_sequence_number") ?? DEFAULT_MAX_SEQUENCE_NUMBER;
    if (maxSequenceNumber < 1) {
      invalid ??= fields.error(
        "max_sequence_number",
        `max_sequence_number of model '${name}' must be at least 1`,
      );
    }
    // OVMS reads it as an unsigned int: more is its INVALID_MAX_SEQUENCE_NUMBER.
    if (maxSequenceNumber > 2 ** 32 - 1) {
      invalid ??= fields.error(
        "max_sequence_number",
        `Sequence max number parameter too high: max_sequence_number of model '${name}' is above 4294967295`,
      );
    }
    const sequence: OvmsSequenceOptions | undefined = stateful
      ? {
          maxSequenceNumber,
          idleSequenceCleanup: fields.bool("idle_sequence_cleanup") ?? true,
          lowLatencyTransformation: fields.bool("low_latency_transformation") ?? false,
        }
      : undefined;

    const notes: string[] = [];
    for (const key of ["graph_path", "subconfig"]) {
      if (keys.has(key) && graph.looked.length > 0)
        notes.push(
          `'${key}' of model '${name}' has no effect: it is read as a model, there being no ${graph.looked.join(" nor ")}`,
        );
    }
    for (const key of WITHOUT_EFFECT) {
      if (keys.has(key)) notes.push(`'${key}' of model '${name}' has no effect on ONNX models in seqserve`);
    }
    if (sequence?.lowLatencyTransformation === true) {
      notes.push(`'low_latency_transformation' of model '${name}' has no effect on ONNX models in seqserve`);
    }
    fields.integer("nireq");
    const targetDevice = fields.string("target_device") ?? "CPU";
    if (targetDevice !== "CPU")
      notes.push(`model '${name}' asks for target_device '${targetDevice}'; seqserve runs it on the CPU`);
    const statePairs = fields.string("state_pairs");
    if (statePairs !== undefined && !stateful) {
      invalid ??= fields.error(
        "state_pairs",
        `key 'state_pairs' of model '${name}' applies to stateful models only; set "stateful": true`,
      );
    }
    const sharedInputs = fields.string("shared_inputs");
    const policy = fields.versionPolicy();

    const entry: OvmsModelEntry = {
      name,
      basePath: isAbsolute(basePath) ? basePath : resolve(this.#folder, basePath),
      versionPolicy: policy.policy,
      stateful,
      sequence,
      targetDevice,
      notes,
      definition: jsonText(config),
      statePairs,
      sharedInputs,
      invalid,
      toParsedConfig: (options = {}) =>
        buildParsedConfig(this.#file, fields, { name, policy, sequence, statePairs, sharedInputs }, options),
    };
    return entry;
  }

  /**
   * Where OVMS looks for an entry's MediaPipe graph (MediapipeGraphConfig::parseNode, then
   * ModelManager::CheckStartFromGraph): graph_path (default graph.pbtxt) in base_path
   * (default: the entry's name, beside the config file), then graph.pbtxt in its folder 1.
   * `found`: the first that is a file, if one is.
   */
  #graph(
    name: string,
    basePath: string | undefined,
    graphPath: string | undefined,
  ): { found: string | undefined; looked: string[] } {
    // A cloud path is no file here; OVMS opens none there either.
    if (basePath !== undefined && /^[a-z][a-z0-9+.-]*:\/\//i.test(basePath))
      return { found: undefined, looked: [] };
    const base = resolve(this.#folder, basePath === undefined || basePath === "" ? name : basePath);
    const looked = [
      graphPath === undefined ? join(base, "graph.pbtxt") : resolve(base, graphPath),
      join(base, "1", "graph.pbtxt"),
    ];
    const isFile = (path: string): boolean => {
      try {
        return statSync(path, { throwIfNoEntry: false })?.isFile() === true;
      } catch {
        return false; // a base_path that is a file, say
      }
    };
    return { found: looked.find(isFile), looked };
  }

  error(position: SourcePosition, detail: string): ConfigError {
    return this.#error(position, detail);
  }
}

/** Typed access to the keys of one model's `config`, with errors naming the model and key. */
class EntryFields {
  readonly #reader: OvmsReader;
  readonly name: string;
  readonly config: ObjectNode;
  readonly keys: ReadonlyMap<string, JsonEntry>;

  constructor(reader: OvmsReader, name: string, config: ObjectNode, keys: ReadonlyMap<string, JsonEntry>) {
    this.#reader = reader;
    this.name = name;
    this.config = config;
    this.keys = keys;
  }

  position(key: string): SourcePosition {
    return this.keys.get(key)?.keyPosition ?? this.config.position;
  }

  error(key: string, detail: string): ConfigError {
    const value = this.keys.get(key)?.value;
    return this.#reader.error(value?.position ?? this.position(key), detail);
  }

  #mistyped(key: string, expected: string, node: JsonNode): ConfigError {
    return this.error(
      key,
      `key '${key}' of model '${this.name}' must be ${expected}, got ${describeJson(node)}`,
    );
  }

  string(key: string): string | undefined {
    const node = this.keys.get(key)?.value;
    if (node === undefined) return undefined;
    if (node.kind !== "string") throw this.#mistyped(key, "a string", node);
    return node.value;
  }

  bool(key: string): boolean | undefined {
    const node = this.keys.get(key)?.value;
    if (node === undefined) return undefined;
    if (node.kind !== "bool") throw this.#mistyped(key, "true or false", node);
    return node.value;
  }

  integer(key: string): number | undefined {
    const node = this.keys.get(key)?.value;
    if (node === undefined) return undefined;
    const value = node.kind === "number" ? Number(node.text) : Number.NaN;
    if (!Number.isSafeInteger(value) || value < 0) throw this.#mistyped(key, "an integer >= 0", node);
    return value;
  }

  /** OVMS's model_version_policy, as an object or a JSON string; default: the latest version. */
  versionPolicy(): { policy: VersionPolicy; message: ParsedMessage } {
    const key = "model_version_policy";
    let node = this.keys.get(key)?.value;
    if (node === undefined)
      return { policy: { kind: "latest", numVersions: 1 }, message: { latest: { num_versions: 1 } } };
    if (node.kind === "string") {
      try {
        node = readJson(node.value, `${key} of model '${this.name}'`);
      } catch (error) {
        throw this.error(
          key,
          `key '${key}' of model '${this.name}' is not valid JSON: ${(error as ConfigError).detail}`,
        );
      }
    }
    const bad = (): ConfigError =>
      this.error(
        key,
        `key '${key}' of model '${this.name}' must be {"latest": {"num_versions": N}}, {"specific": {"versions": [...]}} or {"all": {}}`,
      );
    if (node.kind !== "object" || node.entries.length !== 1) throw bad();
    const [choice] = node.entries as [JsonEntry];
    const body = choice.value;
    if (body.kind !== "object") throw bad();
    const member = (name: string): JsonNode | undefined => body.entries.find((e) => e.key === name)?.value;
    switch (choice.key) {
      case "all":
        if (body.entries.length > 0) throw bad();
        return { policy: { kind: "all" }, message: { all: {} } };
      case "latest": {
        const count = member("num_versions");
        const numVersions =
          count === undefined ? 1 : count.kind === "number" ? Number(count.text) : Number.NaN;
        if (
          !Number.isSafeInteger(numVersions) ||
          numVersions < 1 ||
          body.entries.some((e) => e.key !== "num_versions")
        )
          throw bad();
        return {
          policy: { kind: "latest", numVersions },
          message: { latest: { num_versions: numVersions } },
        };
      }
      case "specific": {
        const list = member("versions");
        if (list?.kind !== "array" || list.items.length === 0 || body.entries.length !== 1) throw bad();
        const versions = list.items.map((v) => (v.kind === "number" ? Number(v.text) : Number.NaN));
        if (versions.some((v) => !Number.isSafeInteger(v) || v < 0)) throw bad();
        return {
          policy: { kind: "specific", versions },
          message: { specific: { versions: versions.map(BigInt) } },
        };
      }
      default:
        throw bad();
    }
  }
}

interface EntryFacts {
  readonly name: string;
  readonly policy: { policy: VersionPolicy; message: ParsedMessage };
  readonly sequence: OvmsSequenceOptions | undefined;
  readonly statePairs: string | undefined;
  readonly sharedInputs: string | undefined;
}

function buildParsedConfig(
  file: string,
  fields: EntryFields,
  facts: EntryFacts,
  options: OvmsToParsedOptions,
): ParsedModelConfig {
  const locations = new SourceLocations();
  const parameters: ParsedMessage = {};
  const message: ParsedMessage = {
    name: facts.name,
    backend: "onnxruntime",
    version_policy: facts.policy.message,
    // One instance, not Triton's two for ONNX Runtime: OVMS's max_sequence_number bounds
    // the model's sequences, which are the slots of its instances together.
    instance_group: [{ count: 1, kind: "KIND_CPU" }],
  };
  locations.setOwn(message, fields.config.position);
  locations.set(message, "name", fields.position("name"));
  locations.set(message, "version_policy", fields.position("model_version_policy"));

  const parameter = (key: string, value: string, from: string): void => {
    parameters[key] = { string_value: value };
    locations.set(parameters, key, fields.position(from));
  };
  const statePairs = facts.statePairs ?? (facts.sequence === undefined ? undefined : options.statePairs);
  if (statePairs !== undefined) parameter("state_pairs", statePairs, "state_pairs");
  const sharedInputs =
    facts.sharedInputs ?? (facts.sequence === undefined ? undefined : options.sharedInputs);
  if (sharedInputs !== undefined) parameter("shared_inputs", sharedInputs, "shared_inputs");

  const { sequence } = facts;
  if (sequence !== undefined) {
    const oldest: ParsedMessage = { max_candidate_sequences: sequence.maxSequenceNumber };
    const batching: ParsedMessage = { oldest };
    locations.set(oldest, "max_candidate_sequences", fields.position("max_sequence_number"));
    locations.setOwn(batching, fields.position("stateful"));
    message.sequence_batching = batching;
    locations.set(message, "sequence_batching", fields.position("stateful"));
    // OVMS refuses a sequence beyond max_sequence_number instead of queueing it.
    parameter("sequence_backlog_limit", "0", "max_sequence_number");
    const pollMinutes = options.sequenceCleanerPollWaitMinutes ?? DEFAULT_SEQUENCE_CLEANER_POLL_MINUTES;
    if (sequence.idleSequenceCleanup && pollMinutes > 0) {
      // The cleaner ends a sequence idle since its previous scan: idle for one to two periods.
      batching.max_sequence_idle_microseconds = BigInt(Math.round(pollMinutes * 60_000_000));
      locations.set(batching, "max_sequence_idle_microseconds", fields.position("idle_sequence_cleanup"));
      // It passes over a sequence in use, and counts from the end of its last request.
      parameter("sequence_idle_from", "last_step", "idle_sequence_cleanup");
    } else {
      parameter("sequence_idle_timeout", "never", "idle_sequence_cleanup");
    }
  }
  if (Object.keys(parameters).length > 0) {
    message.parameters = parameters;
    locations.setOwn(parameters, fields.config.position);
  }
  return { file, format: "ovms", message, locations };
}

/** Reads an OVMS config.json text; `file` is the name used in messages and the base for relative paths. */
export function parseOvmsConfig(text: string, file: string): OvmsConfig {
  return new OvmsReader(file).read(readJson(text, file));
}

export async function readOvmsConfig(path: string): Promise<OvmsConfig> {
  let text: string;
  try {
    text = await readFile(path, "utf8");
  } catch (error) {
    const reason = error instanceof Error ? error.message : String(error);
    throw new ConfigError(path, undefined, `cannot read the configuration: ${reason}`);
  }
  return parseOvmsConfig(text, path);
}

/** Where single-model mode's entry comes from, in messages. */
const SINGLE_MODEL_SOURCE = "the command line (--model_path)";

/**
 * OVMS single-model mode: the model given with --model_path / --model_name and its flags,
 * read as the one entry of a config.json would be (the same checks and defaults).
 */
export function singleModelConfig(model: SingleModelOptions): OvmsConfig {
  const config: Record<string, unknown> = { name: model.name, base_path: model.basePath };
  if (model.stateful) config.stateful = true;
  if (model.maxSequenceNumber !== undefined) config.max_sequence_number = model.maxSequenceNumber;
  if (model.idleSequenceCleanup !== undefined) config.idle_sequence_cleanup = model.idleSequenceCleanup;
  if (model.lowLatencyTransformation !== undefined)
    config.low_latency_transformation = model.lowLatencyTransformation;
  if (model.statePairs !== undefined) config.state_pairs = model.statePairs;
  if (model.modelVersionPolicy !== undefined) config.model_version_policy = model.modelVersionPolicy;
  const parsed = parseOvmsConfig(JSON.stringify({ model_config_list: [{ config }] }), SINGLE_MODEL_SOURCE);
  // The command line's one model: OVMS refuses such flags as it reads them.
  const invalid = parsed.models[0]?.invalid;
  if (invalid !== undefined) throw invalid;
  return parsed;
}
