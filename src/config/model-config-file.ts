import { readFile } from "node:fs/promises";
import { extname } from "node:path";
import { ConfigError } from "./config-error.ts";
import { parseJsonConfig } from "./json/json-config.ts";
import type { ParsedModelConfig } from "./parsed-config.ts";
import { parsePbtxt } from "./pbtxt/pbtxt-parser.ts";

// Reading a Triton model configuration from text or from a file, in either of its forms:
// protobuf text (config.pbtxt) or JSON (config.json, or the `config` of a load request).

export type ModelConfigTextFormat = "pbtxt" | "json";

export interface ModelConfigTextOptions {
  /** The name used in error messages, e.g. "models/vad/config.pbtxt". */
  readonly file: string;
  /** Default: from the file's extension (.json is JSON, anything else text format). */
  readonly format?: ModelConfigTextFormat;
}

function formatOfFile(file: string): ModelConfigTextFormat {
  return extname(file).toLowerCase() === ".json" ? "json" : "pbtxt";
}

/** Parses a model configuration text into its schema-shaped, not yet validated form. */
export function parseModelConfigText(text: string, options: ModelConfigTextOptions): ParsedModelConfig {
  const format = options.format ?? formatOfFile(options.file);
  return format === "json" ? parseJsonConfig(text, options.file) : parsePbtxt(text, options.file);
}

/** Reads and parses a config.pbtxt or config.json; `path` is also the name used in messages. */
export async function parseModelConfigFile(
  path: string,
  format?: ModelConfigTextFormat,
): Promise<ParsedModelConfig> {
  let text: string;
  try {
    text = await readFile(path, "utf8");
  } catch (error) {
    const reason = error instanceof Error ? error.message : String(error);
    throw new ConfigError(path, undefined, `cannot read the model configuration: ${reason}`);
  }
  return parseModelConfigText(text, format === undefined ? { file: path } : { file: path, format });
}
