import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { flagBoolean } from "./flag-boolean.ts";
import { UsageError } from "./usage-error.ts";

// OVMS's config commands: `--add_to_config` lists a model in a config.json, and
// `--remove_from_config` takes it out; the file is written back and the command exits,
// serving nothing (a server watching the file applies the change). As OVMS 2025.4 does it
// (src/config_export_module/config_export.cpp): the entry added holds the name and the
// base path alone, and no other model flag is taken; the first entry of the name is the
// one removed; a file that is not there is created by an add and refused by a remove.
// `--list_models` lists the generative models OVMS pulls into --model_repository_path,
// which seqserve does not pull: it is refused, naming itself.

export interface OvmsConfigEdit {
  readonly action: "add" | "remove";
  readonly configPath: string;
  readonly modelName: string;
  /** The entry's base_path, as given (OVMS keeps a relative path relative to the config file). */
  readonly modelPath: string | undefined;
  /** Lines to print before the edit (the config path taken by default). */
  readonly notes: readonly string[];
}

type Values = Readonly<Record<string, string | string[] | undefined>>;

/** The model flags OVMS refuses beside the config commands, in the order it names them. */
const MODEL_FLAGS = [
  "max_sequence_number",
  "batch_size",
  "shape",
  "layout",
  "model_version_policy",
  "nireq",
  "target_device",
  "plugin_config",
  "stateful",
  "idle_sequence_cleanup",
  "low_latency_transformation",
  "state_pairs",
];

const ADD_USAGE = [
  "Usage: ",
  "  ovms --add_to_config --model_name <model_name> --model_repository_path <repo_path> --config_path <config_path>",
  "  ovms --add_to_config --model_name <model_name> --model_path <model_path> --config_path <config_path>",
];
const REMOVE_USAGE = "  ovms --remove_from_config --model_name <model_name> --config_path <config_path>";

/**
 * The config command the flags ask for, checked as OVMS checks it (CLIParser::parse,
 * Config::validate, in its words); undefined when they ask for none (the server runs).
 */
export function readOvmsConfigEdit(
  values: Values,
  env: Readonly<Record<string, string | undefined>>,
): OvmsConfigEdit | undefined {
  const text = (name: string): string | undefined => {
    const value = values[name];
    if (!Array.isArray(value)) return value;
    if (value.length > 1) throw new UsageError(`--${name} is given more than once`);
    return value[0];
  };
  const on = (name: string): boolean => text(name) !== undefined && flagBoolean(name, text(name)!);
  const add = on("add_to_config");
  const remove = on("remove_from_config");
  const list = on("list_models");
  if (list && add)
    throw new UsageError("error parsing options - --list_models cannot be used with --add_to_config");
  if (list && remove)
    throw new UsageError("error parsing options - --list_models cannot be used with --remove_from_config");
  if (list) {
    throw new UsageError(
      "--list_models is not supported by seqserve: it lists the generative models OVMS pulls (--pull) into --model_repository_path, and seqserve pulls none",
    );
  }
  const repository = text("model_repository_path") ?? nonEmpty(env.OVMS_MODEL_REPOSITORY_PATH);
  if (!add && !remove) {
    if (text("model_repository_path") !== undefined) {
      throw new UsageError(
        "--model_repository_path applies to --add_to_config in seqserve (a model is served with --model_path, or from --config_path)",
      );
    }
    return undefined;
  }
  if (add && remove) throw new UsageError("--add_to_config cannot be used with --remove_from_config");
  if (remove && text("model_path") !== undefined)
    throw new UsageError("error parsing options - --model_path cannot be used with --remove_from_config");

  const notes: string[] = [];
  const given = [...asList(values.config_path), ...asList(values["config-path"])];
  if (given.length > 1) throw new UsageError("--config_path is given more than once");
  let configPath = given[0];
  if (configPath === undefined && nonEmpty(env.OVMS_MODEL_REPOSITORY_PATH) !== undefined) {
    configPath = join(env.OVMS_MODEL_REPOSITORY_PATH!, "config.json");
    notes.push(`Using default config path: ${configPath}`);
  }
  if (configPath === undefined || configPath === "")
    throw new UsageError("Set config_path with add_to_config/remove_from_config");
  const modelName = text("model_name");
  if (modelName === undefined || modelName === "") {
    throw new UsageError(
      ["Set model_name with add_to_config/remove_from_config", ...ADD_USAGE, REMOVE_USAGE].join("\n"),
    );
  }
  // OVMS: --model_path, or else the model's folder in the repository.
  const modelPath =
    text("model_path") ?? (repository === undefined ? undefined : join(repository, modelName));
  if (add && (modelPath === undefined || modelPath === "")) {
    throw new UsageError(
      [
        "Set model_name either with model_path or model_repository_path with add_to_config",
        ...ADD_USAGE,
      ].join("\n"),
    );
  }
  const others = MODEL_FLAGS.filter((flag) => values[flag] !== undefined);
  if (others.length > 0) {
    throw new UsageError(
      `Adding or removing models from the configuration file, allows passing only model_name and model_path parameters. Invalid parameters passed: ${others.join(", ")}`,
    );
  }
  return { action: add ? "add" : "remove", configPath, modelName, modelPath, notes };
}

function nonEmpty(value: string | undefined): string | undefined {
  return value === undefined || value === "" ? undefined : value;
}

function asList(value: string | string[] | undefined): string[] {
  return value === undefined ? [] : Array.isArray(value) ? value : [value];
}

/** OVMS's status messages for what a config command can meet. */
const STATUS = {
  pathInvalid: "The provided base path is invalid or doesn't exists",
  fileInvalid: "File not found or cannot open",
  configFileInvalid: "Configuration file not found or cannot open",
  jsonInvalid: "The file is not valid json",
  nameMissing: "Model with requested name is not found",
  nameOccupied: "Given model name is already occupied",
} as const;

class EditFailure extends Error {}

interface Entry {
  config?: { name?: unknown; base_path?: string | undefined };
}

/**
 * Edits the config file; what to print on standard output and the exit code (0 edited,
 * 1 refused), as OVMS prints them ("Config updated: …", "… error on config update : …").
 */
export function runOvmsConfigEdit(edit: OvmsConfigEdit): { readonly output: string; readonly code: number } {
  const lines = [...edit.notes];
  try {
    apply(edit);
    lines.push(`Config updated: ${edit.configPath}`);
    return { output: `${lines.join("\n")}\n`, code: 0 };
  } catch (error) {
    if (!(error instanceof EditFailure)) throw error;
    lines.push(`${edit.configPath} error on config update : ${error.message}`);
    return { output: `${lines.join("\n")}\n`, code: 1 };
  }
}

function apply(edit: OvmsConfigEdit): void {
  const { configPath, modelName } = edit;
  if (!existsSync(configPath)) {
    if (edit.action === "remove") throw new EditFailure(STATUS.pathInvalid);
    write(configPath, { model_config_list: [{ config: { name: modelName, base_path: edit.modelPath } }] });
    return;
  }
  let text: string;
  try {
    text = readFileSync(configPath, "utf8");
  } catch (error) {
    // A folder reads as nothing in OVMS, which is not JSON; anything else cannot be opened.
    if ((error as NodeJS.ErrnoException).code === "EISDIR") throw new EditFailure(STATUS.jsonInvalid);
    throw new EditFailure(STATUS.configFileInvalid);
  }
  let document: unknown;
  try {
    document = JSON.parse(text);
  } catch {
    throw new EditFailure(STATUS.jsonInvalid);
  }
  const list = (document as { model_config_list?: unknown } | null)?.model_config_list;
  if (typeof document !== "object" || Array.isArray(document) || !Array.isArray(list))
    throw new EditFailure(STATUS.jsonInvalid);
  const entries = list as Entry[];
  const index = entries.findIndex((entry) => entry?.config?.name === modelName);
  if (edit.action === "add") {
    if (index >= 0) throw new EditFailure(STATUS.nameOccupied);
    entries.push({ config: { name: modelName, base_path: edit.modelPath } });
  } else {
    if (index < 0) throw new EditFailure(STATUS.nameMissing);
    entries.splice(index, 1);
  }
  write(configPath, document);
}

function write(path: string, document: unknown): void {
  try {
    // rapidjson's PrettyWriter indents by four spaces; OVMS ends the file with a newline.
    writeFileSync(path, `${JSON.stringify(document, null, 4)}\n`);
  } catch {
    throw new EditFailure(STATUS.fileInvalid);
  }
}
