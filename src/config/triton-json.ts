import type protobuf from "protobufjs";
import { fieldShapeOf, modelConfigType, type ValueType } from "./model-config-schema.ts";
import { isParsedMessage, type ParsedMessage, type ParsedValue, setEntry } from "./parsed-config.ts";

// The JSON form of a (completed) model configuration, as Triton prints it: proto field
// names, enums by name, every scalar, list and map field present with its default, and
// messages and oneof members only when set (protobuf's JSON printer with
// preserve_proto_field_names and always_print_primitive_fields).
//
// 64-bit integers: Triton's HTTP `/config` endpoint turns them into JSON numbers, while
// protobuf's own JSON mapping (and so Triton's gRPC answer rendered as JSON) writes them
// as strings. Both are available; a value beyond 2^53 stays a string even as "number",
// since a JSON number that large would not survive a JavaScript reader.

export interface TritonJsonOptions {
  /** How int64/uint64 fields are written. Default "number", as Triton's HTTP endpoint does. */
  readonly int64?: "number" | "string";
}

type Json = string | number | boolean | Json[] | { [key: string]: Json };

function scalarDefault(type: ValueType): ParsedValue {
  if (type.kind === "enum") return type.enumType.valuesById[0] ?? "";
  if (type.kind === "message") return {};
  switch (type.scalar) {
    case "int64":
    case "uint64":
      return 0n;
    case "bool":
      return false;
    case "string":
    case "bytes":
      return "";
    default:
      return 0;
  }
}

function printValue(value: ParsedValue, type: ValueType, options: TritonJsonOptions): Json {
  if (type.kind === "message")
    return printMessage(isParsedMessage(value) ? value : {}, type.messageType, options);
  if (typeof value === "bigint") {
    const safe = value <= BigInt(Number.MAX_SAFE_INTEGER) && value >= BigInt(Number.MIN_SAFE_INTEGER);
    return options.int64 === "string" || !safe ? value.toString() : Number(value);
  }
  if (typeof value === "number" && !Number.isFinite(value)) {
    return Number.isNaN(value) ? "NaN" : value > 0 ? "Infinity" : "-Infinity";
  }
  return value as Json;
}

function printMessage(
  message: ParsedMessage,
  type: protobuf.Type,
  options: TritonJsonOptions,
): { [key: string]: Json } {
  const json: { [key: string]: Json } = {};
  for (const field of type.fieldsArray) {
    const shape = fieldShapeOf(field);
    const value = message[field.name];
    if (shape.kind === "repeated") {
      const items = Array.isArray(value) ? value : [];
      json[field.name] = items.map((item) => printValue(item, shape.value, options));
    } else if (shape.kind === "map") {
      const entries = isParsedMessage(value) ? value : {};
      const map: { [key: string]: Json } = {};
      for (const [key, item] of Object.entries(entries))
        setEntry(map, key, printValue(item, shape.value, options));
      json[field.name] = map;
    } else if (value !== undefined) {
      json[field.name] = printValue(value, shape.value, options);
    } else if (shape.value.kind !== "message" && field.partOf === null) {
      json[field.name] = printValue(scalarDefault(shape.value), shape.value, options);
    }
  }
  return json;
}

/** The Triton JSON of a ModelConfig message (or of any message of the schema, given its type). */
export function toTritonJson(
  message: ParsedMessage,
  options: TritonJsonOptions = {},
  type: protobuf.Type = modelConfigType(),
): Record<string, unknown> {
  return printMessage(message, type, options);
}
