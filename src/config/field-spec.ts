import type protobuf from "protobufjs";
import { type FieldShape, fieldShapeOf, type ValueType } from "./model-config-schema.ts";
import type { ParsedMessage } from "./parsed-config.ts";

// The facts a reader needs about one field it is filling in: its proto name, its shape
// (single, repeated, map) and the oneof it belongs to. Map entries are read as tiny
// messages with a `key` and a `value` field, described the same way.

export interface FieldSpec {
  readonly name: string;
  readonly shape: FieldShape;
  /** The oneof this field belongs to: its name and the names of all its members. */
  readonly oneof: { readonly name: string; readonly members: readonly string[] } | undefined;
}

export function fieldSpecOf(field: protobuf.FieldBase): FieldSpec {
  const oneof = field.partOf;
  return {
    name: field.name,
    shape: fieldShapeOf(field),
    oneof: oneof === null ? undefined : { name: oneof.name, members: oneof.oneof },
  };
}

/** The `key` and `value` pseudo-fields of one entry of a map field. */
export function mapEntrySpecs(key: ValueType, value: ValueType): { key: FieldSpec; value: FieldSpec } {
  return {
    key: { name: "key", shape: { kind: "single", value: key }, oneof: undefined },
    value: { name: "value", shape: { kind: "single", value }, oneof: undefined },
  };
}

/** The member of `spec`'s oneof already set in `target`, other than `spec` itself. */
export function oneofRival(spec: FieldSpec, target: ParsedMessage): string | undefined {
  if (spec.oneof === undefined) return undefined;
  return spec.oneof.members.find((member) => member !== spec.name && Object.hasOwn(target, member));
}

/** The message for two members of one oneof being set. */
export function oneofMessage(spec: FieldSpec, rival: string): string {
  return `field '${spec.name}' cannot be set together with '${rival}': both belong to oneof '${spec.oneof?.name ?? ""}'`;
}

/** A map key as the object key it becomes (integer and bool keys in their decimal / word form). */
export function mapKeyString(key: string | number | bigint | boolean): string {
  return typeof key === "string" ? key : String(key);
}
