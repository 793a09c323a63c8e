import type protobuf from "protobufjs";
import { ConfigError, type SourcePosition } from "../config-error.ts";
import { type FieldSpec, fieldSpecOf, mapKeyString, oneofMessage, oneofRival } from "../field-spec.ts";
import { suggestion } from "../field-suggestion.ts";
import { findField, modelConfigType, typeDisplayName, type ValueType } from "../model-config-schema.ts";
import {
  type ParsedMessage,
  type ParsedModelConfig,
  type ParsedValue,
  SourceLocations,
  setEntry,
} from "../parsed-config.ts";
import { convertScalar, type Literal } from "../scalar-value.ts";
import { describeJson, type JsonNode, readJson } from "./json-reader.ts";

// A Triton config in JSON (config.json, or the `config` of a load request), read against
// the same schema as config.pbtxt and into the same parsed form. It follows protobuf's
// JSON mapping as Triton applies it: proto field names or their lowerCamelCase JSON
// names, 64-bit integers as numbers or strings, enums by name (any case) or number,
// null for "not set", unknown fields refused. Messages name the field by its path
// (`input[1].dims[0]`).

const INTEGER_TEXT = /^-?\d+$/;
const NUMBER_TEXT = /^-?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?$/;
const FLOAT_WORDS = new Set(["NaN", "Infinity", "-Infinity"]);

class JsonConfigReader {
  readonly #file: string;
  readonly #locations = new SourceLocations();

  constructor(file: string) {
    this.#file = file;
  }

  get locations(): SourceLocations {
    return this.#locations;
  }

  #error(position: SourcePosition, detail: string): ConfigError {
    return new ConfigError(this.#file, position, detail);
  }

  message(node: JsonNode, type: protobuf.Type, path: string): ParsedMessage {
    if (node.kind !== "object") {
      const what = path === "" ? "the configuration" : `field '${path}'`;
      throw this.#error(node.position, `${what} expects an object, got ${describeJson(node)}`);
    }
    const message: ParsedMessage = {};
    this.#locations.setOwn(message, node.position);
    for (const entry of node.entries) {
      const field = findField(type, entry.key, true);
      const fieldPath = path === "" ? entry.key : `${path}.${entry.key}`;
      if (field === undefined) {
        const known = type.fieldsArray.flatMap((f) => [f.name, f.jsonName]);
        throw this.#error(
          entry.keyPosition,
          `unknown field '${fieldPath}' in ${typeDisplayName(type)}${suggestion(entry.key, known)}`,
        );
      }
      const spec = fieldSpecOf(field);
      const specPath = path === "" ? spec.name : `${path}.${spec.name}`;
      if (Object.hasOwn(message, spec.name))
        throw this.#error(entry.keyPosition, `field '${specPath}' given twice`);
      if (entry.value.kind === "null") continue;
      const rival = oneofRival(spec, message);
      if (rival !== undefined) throw this.#error(entry.keyPosition, oneofMessage(spec, rival));
      message[spec.name] = this.#field(entry.value, spec, specPath);
      this.#locations.set(message, spec.name, entry.keyPosition);
    }
    return message;
  }

  #field(node: JsonNode, spec: FieldSpec, path: string): ParsedValue {
    const { shape } = spec;
    if (shape.kind === "single") return this.#value(node, shape.value, path);
    if (shape.kind === "repeated") {
      if (node.kind !== "array")
        throw this.#error(node.position, `field '${path}' expects a list, got ${describeJson(node)}`);
      const list: ParsedValue[] = [];
      this.#locations.setOwn(list, node.position);
      node.items.forEach((item, i) => {
        this.#locations.set(list, i, item.position);
        list.push(this.#value(item, shape.value, `${path}[${i}]`));
      });
      return list;
    }
    if (node.kind !== "object")
      throw this.#error(node.position, `field '${path}' expects an object, got ${describeJson(node)}`);
    const map: ParsedMessage = {};
    this.#locations.setOwn(map, node.position);
    for (const entry of node.entries) {
      const keyNode: JsonNode = {
        kind: "string",
        value: entry.key,
        text: JSON.stringify(entry.key),
        position: entry.keyPosition,
      };
      const key = this.#value(keyNode, shape.key, `${path} key`);
      const keyText = mapKeyString(key as string | number | bigint | boolean);
      if (Object.hasOwn(map, keyText)) {
        throw this.#error(entry.keyPosition, `key '${keyText}' given twice in map field '${path}'`);
      }
      setEntry(map, keyText, this.#value(entry.value, shape.value, `${path}["${entry.key}"]`));
      this.#locations.set(map, keyText, entry.value.position);
    }
    return map;
  }

  #value(node: JsonNode, type: ValueType, path: string): ParsedValue {
    if (type.kind === "message") return this.message(node, type.messageType, path);
    const converted = convertScalar(type, this.#literal(node, type), path, { caseInsensitiveEnums: true });
    if (!converted.ok) throw this.#error(node.position, converted.message);
    return converted.value;
  }

  /** How a JSON value reads as a literal of `type`: numbers may come quoted, integers as 1.0 or 1e3. */
  #literal(node: JsonNode, type: ValueType): Literal {
    const numeric =
      type.kind === "scalar" && type.scalar !== "bool" && type.scalar !== "string" && type.scalar !== "bytes";
    switch (node.kind) {
      case "number":
        return numberLiteral(node.text);
      case "string":
        if (numeric && NUMBER_TEXT.test(node.value)) return { ...numberLiteral(node.value), text: node.text };
        if (numeric && FLOAT_WORDS.has(node.value)) return { kind: "identifier", text: node.value };
        return { kind: "string", value: node.value, text: node.text };
      case "bool":
        return { kind: "bool", value: node.value, text: String(node.value) };
      default:
        // Objects, lists and null are never scalars; this literal only carries the description.
        return { kind: "identifier", text: describeJson(node) };
    }
  }
}

function numberLiteral(text: string): Literal {
  if (INTEGER_TEXT.test(text)) return { kind: "integer", value: BigInt(text), text };
  const value = Number(text);
  // protobuf's JSON mapping accepts an integral value in any notation for integer fields.
  if (Number.isSafeInteger(value)) return { kind: "integer", value: BigInt(value), text };
  return { kind: "float", value, text };
}

/** Reads a JSON model configuration text. `file` is the name used in error messages. */
export function parseJsonConfig(text: string, file: string): ParsedModelConfig {
  return jsonToParsedConfig(readJson(text, file), file);
}

/** Converts an already read JSON value into a parsed config (of `type`, inference.ModelConfig by default). */
function jsonToParsedConfig(
  node: JsonNode,
  file: string,
  type: protobuf.Type = modelConfigType(),
): ParsedModelConfig {
  const reader = new JsonConfigReader(file);
  const message = reader.message(node, type, "");
  return { file, format: "json", message, locations: reader.locations };
}
