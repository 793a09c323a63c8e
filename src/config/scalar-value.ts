import type { Enum } from "protobufjs";
import type { ValueType } from "./model-config-schema.ts";
import { typeDisplayName } from "./model-config-schema.ts";
import type { ParsedScalar } from "./parsed-config.ts";

// Turning one literal of a config file into the value of a scalar or enum field. Both
// readers (text format and JSON) describe what they read as a Literal, so the rules
// and the messages are the same whatever the file's format.

export type Literal =
  | { readonly kind: "integer"; readonly value: bigint; readonly text: string }
  | { readonly kind: "float"; readonly value: number; readonly text: string }
  /** A bare word: true, inf, TYPE_FP32... */
  | { readonly kind: "identifier"; readonly text: string }
  | { readonly kind: "string"; readonly value: string; readonly text: string }
  | { readonly kind: "bool"; readonly value: boolean; readonly text: string };

export type Conversion =
  | { readonly ok: true; readonly value: ParsedScalar }
  | { readonly ok: false; readonly message: string };

export interface ConversionOptions {
  /** Enum names may differ in case (Triton parses JSON configs this way). */
  readonly caseInsensitiveEnums?: boolean;
  /**
   * The literal was written in protobuf text format (config.pbtxt), which protobuf's C++
   * parser (Triton's) reads more strictly than JSON: an enum value is a bare name or a
   * number, never a quoted string; a float field takes decimal numbers only, not 0x10 or
   * 010; an unsigned integer takes no '-', even on 0.
   */
  readonly textFormat?: boolean;
}

const INTEGER_RANGES = {
  int32: [-(2n ** 31n), 2n ** 31n - 1n],
  uint32: [0n, 2n ** 32n - 1n],
  int64: [-(2n ** 63n), 2n ** 63n - 1n],
  uint64: [0n, 2n ** 64n - 1n],
} as const;

const TRUE_WORDS = new Set(["true", "True", "t"]);
const FALSE_WORDS = new Set(["false", "False", "f"]);

const fail = (message: string): Conversion => ({ ok: false, message });
const ok = (value: ParsedScalar): Conversion => ({ ok: true, value });

function floatWord(text: string): number | undefined {
  const negative = text.startsWith("-");
  const word = (negative ? text.slice(1) : text).toLowerCase();
  if (word === "inf" || word === "infinity") return negative ? -Infinity : Infinity;
  if (word === "nan") return Number.NaN;
  return undefined;
}

/**
 * The value of a `float` field. Triton keeps it as a float32 (1e-50 becomes 0, 1e39
 * infinity) and prints it as protobuf does (SimpleFtoa: 6 significant digits, or 9 when 6
 * do not give the same float32 back), so 0.1 stays 0.1 and 0.123456789 becomes
 * 0.123456791. The number kept is that printed one: its float32 is the same, and the
 * config's JSON is Triton's.
 */
function float32Value(value: number): number {
  const single = Math.fround(value);
  if (!Number.isFinite(single) || single === 0) return single;
  const short = Number(single.toPrecision(6));
  return Math.fround(short) === single ? short : Number(single.toPrecision(9));
}

export function convertScalar(
  type: ValueType,
  literal: Literal,
  field: string,
  options: ConversionOptions = {},
): Conversion {
  if (type.kind === "message") return fail(`field '${field}' expects a message, got ${literal.text}`);
  if (type.kind === "enum") return convertEnum(type.enumType, literal, field, options);
  switch (type.scalar) {
    case "int32":
    case "uint32":
    case "int64":
    case "uint64": {
      if (literal.kind !== "integer") return fail(`field '${field}' expects an integer, got ${literal.text}`);
      const [min, max] = INTEGER_RANGES[type.scalar];
      if (literal.value < min || literal.value > max) {
        return fail(`value ${literal.text} is out of range for field '${field}' (${type.scalar})`);
      }
      if (options.textFormat === true && min === 0n && literal.text.startsWith("-")) {
        return fail(`field '${field}' is unsigned (${type.scalar}), so it takes no '-', got ${literal.text}`);
      }
      return ok(type.scalar === "int64" || type.scalar === "uint64" ? literal.value : Number(literal.value));
    }
    case "float":
    case "double": {
      const value = floatLiteral(literal, field, options);
      if (!value.ok || type.scalar === "double") return value;
      return ok(float32Value(value.value as number));
    }
    case "bool": {
      if (literal.kind === "bool") return ok(literal.value);
      if (literal.kind === "identifier" && TRUE_WORDS.has(literal.text)) return ok(true);
      if (literal.kind === "identifier" && FALSE_WORDS.has(literal.text)) return ok(false);
      if (literal.kind === "integer" && (literal.value === 0n || literal.value === 1n)) {
        return ok(literal.value === 1n);
      }
      return fail(`field '${field}' expects true or false, got ${literal.text}`);
    }
    case "string":
    case "bytes":
      if (literal.kind === "string") return ok(literal.value);
      return fail(`field '${field}' expects a string, got ${literal.text}`);
  }
}

function floatLiteral(literal: Literal, field: string, options: ConversionOptions): Conversion {
  if (literal.kind === "integer") {
    if (options.textFormat === true && /^-?0[0-9xX]/.test(literal.text)) {
      return fail(`field '${field}' expects a decimal number, got ${literal.text}`);
    }
    return ok(Number(literal.value));
  }
  if (literal.kind === "float") return ok(literal.value);
  if (literal.kind === "identifier") {
    const value = floatWord(literal.text);
    if (value !== undefined) return ok(value);
  }
  return fail(`field '${field}' expects a number, got ${literal.text}`);
}

function convertEnum(
  enumType: Enum,
  literal: Literal,
  field: string,
  options: ConversionOptions,
): Conversion {
  const typeName = typeDisplayName(enumType);
  if (literal.kind === "string" && options.textFormat === true) {
    return fail(
      `field '${field}' expects a value of enum ${typeName} as a bare name or a number, got the quoted string ${literal.text}`,
    );
  }
  if (literal.kind === "integer") {
    const name =
      literal.value >= -(2n ** 31n) && literal.value < 2n ** 31n
        ? enumType.valuesById[Number(literal.value)]
        : undefined;
    if (name === undefined)
      return fail(`unknown value ${literal.text} for enum field '${field}' (${typeName})`);
    return ok(name);
  }
  const word =
    literal.kind === "identifier" ? literal.text : literal.kind === "string" ? literal.value : undefined;
  if (word === undefined || word.startsWith("-")) {
    return fail(`field '${field}' expects a value of enum ${typeName}, got ${literal.text}`);
  }
  if (Object.hasOwn(enumType.values, word)) return ok(word);
  if (options.caseInsensitiveEnums === true) {
    const match = Object.keys(enumType.values).find((name) => name.toLowerCase() === word.toLowerCase());
    if (match !== undefined) return ok(match);
  }
  return fail(`unknown value '${word}' for enum field '${field}' (${typeName})`);
}
