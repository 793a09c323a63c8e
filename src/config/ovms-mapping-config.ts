import { readFileSync } from "node:fs";
import { join } from "node:path";

// OpenVINO Model Server's `mapping_config.json`, read from a model's version folder
// (OVMS's ModelConfig::parseModelMapping): the names clients use for the model's tensors,
//
//   {"inputs": {"<the model's input>": "<the client's name>"}, "outputs": {…}}
//
// either object optional, string values, no other key (OVMS's MODELS_MAPPING_SCHEMA).
// A tensor the file does not name keeps the model's name. As in OVMS, a file that is not
// valid is logged and the model is served with its own names (OVMS goes on loading).

const MAPPING_CONFIG_FILE = "mapping_config.json";

/** The model's tensor names to the names clients see, per direction. */
export interface TensorNameMapping {
  /** Where it was read from, for messages. */
  readonly file: string;
  readonly inputs: ReadonlyMap<string, string>;
  readonly outputs: ReadonlyMap<string, string>;
}

export type MappingConfigRead =
  | { readonly mapping: TensorNameMapping | undefined; readonly problem?: undefined }
  | { readonly mapping?: undefined; readonly problem: string };

/** The version folder's mapping_config.json: none when there is no file, or why it is not used. */
export function readMappingConfig(versionDir: string): MappingConfigRead {
  const file = join(versionDir, MAPPING_CONFIG_FILE);
  let text: string;
  try {
    text = readFileSync(file, "utf8");
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT") return { mapping: undefined };
    return { problem: `'${file}' cannot be read (${(error as NodeJS.ErrnoException).code ?? "unreadable"})` };
  }
  let doc: unknown;
  try {
    doc = JSON.parse(text);
  } catch {
    return { problem: `'${file}' is not a valid JSON file` };
  }
  if (typeof doc !== "object" || doc === null || Array.isArray(doc))
    return { problem: `'${file}' must be a JSON object with "inputs" and "outputs" objects` };
  const record = doc as Record<string, unknown>;
  const extra = Object.keys(record).filter((key) => key !== "inputs" && key !== "outputs");
  if (extra.length > 0)
    return {
      problem: `'${file}' has ${extra.map((k) => `'${k}'`).join(", ")}; it may hold "inputs" and "outputs" only`,
    };
  const inputs = namesOf(record.inputs);
  const outputs = namesOf(record.outputs);
  for (const [key, names] of [
    ["inputs", inputs],
    ["outputs", outputs],
  ] as const) {
    if (names === undefined)
      return {
        problem: `'${file}': "${key}" must be an object whose values are strings (the model's name: the client's)`,
      };
  }
  return { mapping: { file, inputs: inputs!, outputs: outputs! } };
}

function namesOf(value: unknown): Map<string, string> | undefined {
  if (value === undefined) return new Map();
  if (typeof value !== "object" || value === null || Array.isArray(value)) return undefined;
  const names = new Map<string, string>();
  for (const [model, client] of Object.entries(value)) {
    if (typeof client !== "string") return undefined;
    names.set(model, client);
  }
  return names;
}
