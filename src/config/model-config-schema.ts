import { fileURLToPath } from "node:url";
import protobuf from "protobufjs";

// The schema every config reader is guided by: proto/model_config.proto, loaded once with
// protobufjs keeping the proto field names. It tells each field's type, whether it is
// repeated, a map or part of a oneof, and the names of enum values.

export const MODEL_CONFIG_PROTO_PATH = fileURLToPath(
  new URL("../../proto/model_config.proto", import.meta.url),
);

let root: protobuf.Root | undefined;

/** The protobufjs Root of model_config.proto (package `inference`), field names as in the proto. */
export function loadModelConfigRoot(): protobuf.Root {
  if (root === undefined) {
    const loaded = new protobuf.Root().loadSync(MODEL_CONFIG_PROTO_PATH, { keepCase: true });
    loaded.resolveAll();
    root = loaded;
  }
  return root;
}

export function modelConfigType(): protobuf.Type {
  return loadModelConfigRoot().lookupType("inference.ModelConfig");
}

/** The kinds a scalar value can take, whatever its wire encoding. */
type ScalarKind = "int32" | "uint32" | "int64" | "uint64" | "float" | "double" | "bool" | "string" | "bytes";

const SCALAR_KINDS: Record<string, ScalarKind> = {
  int32: "int32",
  sint32: "int32",
  sfixed32: "int32",
  uint32: "uint32",
  fixed32: "uint32",
  int64: "int64",
  sint64: "int64",
  sfixed64: "int64",
  uint64: "uint64",
  fixed64: "uint64",
  float: "float",
  double: "double",
  bool: "bool",
  string: "string",
  bytes: "bytes",
};

/** What a field (or a map's key or value) holds. */
export type ValueType =
  | { readonly kind: "scalar"; readonly scalar: ScalarKind }
  | { readonly kind: "enum"; readonly enumType: protobuf.Enum }
  | { readonly kind: "message"; readonly messageType: protobuf.Type };

function valueTypeOf(typeName: string, resolved: protobuf.ReflectionObject | null): ValueType {
  const scalar = SCALAR_KINDS[typeName];
  if (scalar !== undefined) return { kind: "scalar", scalar };
  if (resolved instanceof protobuf.Enum) return { kind: "enum", enumType: resolved };
  if (resolved instanceof protobuf.Type) return { kind: "message", messageType: resolved };
  throw new Error(`unresolved type '${typeName}' in model_config.proto`);
}

/** A field's shape: a single value, a repeated list, or a map. */
export type FieldShape =
  | { readonly kind: "single"; readonly value: ValueType }
  | { readonly kind: "repeated"; readonly value: ValueType }
  | { readonly kind: "map"; readonly key: ValueType; readonly value: ValueType };

export function fieldShapeOf(field: protobuf.FieldBase): FieldShape {
  const value = valueTypeOf(field.type, field.resolvedType);
  if (field instanceof protobuf.MapField) {
    return { kind: "map", key: valueTypeOf(field.keyType, null), value };
  }
  return field.repeated ? { kind: "repeated", value } : { kind: "single", value };
}

/** The field of `type` named `name` in the proto (snake_case) or, when `allowJsonName`, in lowerCamelCase. */
export function findField(
  type: protobuf.Type,
  name: string,
  allowJsonName = false,
): protobuf.FieldBase | undefined {
  const field = type.fields[name];
  if (field !== undefined) return field;
  if (!allowJsonName) return undefined;
  return type.fieldsArray.find((f) => f.jsonName === name);
}

/** A short, stable name for messages: "inference.ModelConfig". */
export function typeDisplayName(type: protobuf.ReflectionObject): string {
  return type.fullName.startsWith(".") ? type.fullName.slice(1) : type.fullName;
}
