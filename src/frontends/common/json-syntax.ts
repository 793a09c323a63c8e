// Why a client's JSON text did not parse, told as rapidjson tells it: Triton and TF-Serving
// answer a malformed body with rapidjson's description and the byte offset of the fault
// ("failed to parse the request JSON buffer: Invalid value. at 0"), and clients and their
// tests know those words. V8's own messages change between Node versions and quote the
// client's text back; only their kind and position are used here.

import { invalidArg } from "../../core/errors.ts";
import { checkJsonDepth } from "./json-depth.ts";
import { parseJsonWithNonFinite } from "./non-finite-json.ts";
import { firstNotUtf8Byte, notUtf8Description } from "./utf8-body.ts";

export interface JsonSyntaxFault {
  /** rapidjson's description of the fault (GetParseError_En). */
  readonly description: string;
  /** Where the fault is, in bytes of the UTF-8 text; undefined where it cannot be told cheaply. */
  readonly byteOffset: number | undefined;
}

/** V8's JSON.parse messages, by their opening words, and rapidjson's words for the same fault. */
const DESCRIPTIONS: readonly (readonly [string, string])[] = [
  [
    "Unexpected non-whitespace character after JSON",
    "The document root must not be followed by other values.",
  ],
  ["Expected property name or '}'", "Missing a name for object member."],
  ["Expected double-quoted property name", "Missing a name for object member."],
  ["Expected ':' after property name", "Missing a colon after a name of object member."],
  ["Expected ',' or '}' after property value", "Missing a comma or '}' after an object member."],
  ["Expected ',' or ']' after array element", "Missing a comma or ']' after an array element."],
  ["Unterminated string", "Missing a closing quotation mark in string."],
  ["Bad escaped character", "Invalid escape character in string."],
  ["Bad Unicode escape", "Incorrect hex digit after \\u escape in string."],
  ["Bad control character", "Invalid encoding in string."],
  ["Unterminated fractional number", "Missing fraction part in number."],
  ["Exponent part is missing a number", "Missing exponent in number."],
];

const INVALID_VALUE = "Invalid value.";

/**
 * Texts up to this many characters have the place of an unexpected token found by parsing
 * prefixes (V8 does not give it); a longer one would cost a client's body many parses.
 */
const SEARCHED_TEXT_CHARS = 64 * 1024;

/** The fault JSON.parse found in `text`, as rapidjson describes it. */
export function jsonSyntaxFault(text: string, error: unknown): JsonSyntaxFault {
  const message = error instanceof Error ? error.message : "";
  if (text.trim() === "") return { description: "The document is empty.", byteOffset: 0 };
  const position = /at position (\d+)/.exec(message);
  const description = DESCRIPTIONS.find(([opening]) => message.startsWith(opening))?.[1] ?? INVALID_VALUE;
  if (position !== null) return { description, byteOffset: byteOffset(text, Number(position[1])) };
  if (message.startsWith("Unexpected end")) return { description, byteOffset: byteOffset(text, text.length) };
  const at = text.length <= SEARCHED_TEXT_CHARS ? unexpectedTokenPosition(text) : undefined;
  return { description, byteOffset: at === undefined ? undefined : byteOffset(text, at) };
}

/**
 * Where parsing `text` first fails, found by bisection over its prefixes: a prefix that
 * ends before the fault fails only for ending early (or parses), one that holds it fails
 * inside. Undefined when the text parses.
 */
function unexpectedTokenPosition(text: string): number | undefined {
  if (!failsInside(text)) return undefined;
  let low = 0; // a prefix of this length does not hold the fault
  let high = text.length; // one of this length does
  while (high - low > 1) {
    const middle = (low + high) >>> 1;
    if (failsInside(text.slice(0, middle))) high = middle;
    else low = middle;
  }
  return high - 1;
}

/** Whether JSON.parse fails on `prefix` before reaching its end. */
function failsInside(prefix: string): boolean {
  try {
    JSON.parse(prefix);
    return false;
  } catch (error) {
    const message = (error as Error).message;
    if (message.startsWith("Unexpected end")) return false;
    const position = /at position (\d+)/.exec(message);
    return position === null || Number(position[1]) < prefix.length;
  }
}

function byteOffset(text: string, position: number): number {
  return Buffer.byteLength(text.slice(0, position), "utf8");
}

/**
 * A request body's JSON, or a 400 in Triton's words for one that does not parse (the
 * KServe forms over HTTP and WebSocket, and SageMaker's bodies, which take them). As
 * Triton's reader, it takes `NaN` and the infinities as numbers (non-finite-json.ts).
 */
export function parseRequestJson(text: string): unknown {
  checkJsonDepth(text);
  try {
    return parseJsonWithNonFinite(text).json;
  } catch (error) {
    const { description, byteOffset } = jsonSyntaxFault(text, error);
    const where = byteOffset === undefined ? "" : ` at ${byteOffset}`;
    throw invalidArg(`failed to parse the request JSON buffer: ${description}${where}`);
  }
}

/**
 * The first `length` bytes of a request body as text; a 400 in Triton's words, with the
 * byte offset, for bytes that are not UTF-8 (the KServe forms, and SageMaker's bodies).
 */
export function requestJsonText(body: Buffer, length: number): string {
  const bytes = body.subarray(0, length);
  const offset = firstNotUtf8Byte(bytes);
  if (offset !== undefined) {
    throw invalidArg(
      `failed to parse the request JSON buffer: ${notUtf8Description(bytes, offset)} at ${offset}`,
    );
  }
  return bytes.toString("utf8");
}
