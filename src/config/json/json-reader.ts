import { ConfigError, type SourcePosition } from "../config-error.ts";
import { MAX_CONFIG_NESTING, NESTING_TOO_DEEP } from "../parsed-config.ts";

// A small JSON reader that, unlike JSON.parse, remembers where every value starts (so
// config errors can name a line) and keeps numbers as their source text (so a 64-bit
// integer such as 18446744073709551615 is not rounded on the way in).

export type JsonNode =
  | { readonly kind: "object"; readonly entries: readonly JsonEntry[]; readonly position: SourcePosition }
  | { readonly kind: "array"; readonly items: readonly JsonNode[]; readonly position: SourcePosition }
  | {
      readonly kind: "string";
      readonly value: string;
      readonly text: string;
      readonly position: SourcePosition;
    }
  | { readonly kind: "number"; readonly text: string; readonly position: SourcePosition }
  | { readonly kind: "bool"; readonly value: boolean; readonly position: SourcePosition }
  | { readonly kind: "null"; readonly position: SourcePosition };

export interface JsonEntry {
  readonly key: string;
  readonly keyPosition: SourcePosition;
  readonly value: JsonNode;
}

const ESCAPES: Record<string, string> = {
  '"': '"',
  "\\": "\\",
  "/": "/",
  b: "\b",
  f: "\f",
  n: "\n",
  r: "\r",
  t: "\t",
};
const NUMBER = /-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?/y;

class JsonReader {
  readonly #text: string;
  readonly #file: string;
  #index = 0;
  #line = 1;
  #lineStart = 0;
  /** Objects and lists open around the value being read. */
  #depth = 0;

  constructor(text: string, file: string) {
    // A UTF-8 byte order mark is not part of the document.
    this.#text = text.startsWith("\uFEFF") ? text.slice(1) : text;
    this.#file = file;
  }

  read(): JsonNode {
    const value = this.#value();
    this.#skipSpace();
    if (this.#index < this.#text.length) throw this.#error("unexpected content after the JSON value");
    return value;
  }

  #position(): SourcePosition {
    return { line: this.#line, column: this.#index - this.#lineStart + 1 };
  }

  #error(detail: string, position: SourcePosition = this.#position()): ConfigError {
    return new ConfigError(this.#file, position, detail);
  }

  #skipSpace(): void {
    const text = this.#text;
    while (this.#index < text.length) {
      const c = text[this.#index];
      if (c === "\n") {
        this.#index++;
        this.#line++;
        this.#lineStart = this.#index;
      } else if (c === " " || c === "\t" || c === "\r") {
        this.#index++;
      } else {
        return;
      }
    }
  }

  #describeHere(): string {
    const c = this.#text[this.#index];
    return c === undefined ? "end of file" : `'${c}'`;
  }

  #expect(c: string, context: string): void {
    this.#skipSpace();
    if (this.#text[this.#index] !== c)
      throw this.#error(`expected '${c}' ${context}, got ${this.#describeHere()}`);
    this.#index++;
  }

  #value(): JsonNode {
    this.#skipSpace();
    const position = this.#position();
    const c = this.#text[this.#index];
    if (c === "{" || c === "[") {
      if (this.#depth === MAX_CONFIG_NESTING) throw this.#error(NESTING_TOO_DEEP, position);
      this.#depth++;
      const node = c === "{" ? this.#object(position) : this.#array(position);
      this.#depth--;
      return node;
    }
    if (c === '"') return this.#string(position);
    if (c === "-" || (c !== undefined && c >= "0" && c <= "9")) return this.#number(position);
    for (const [word, node] of [
      ["true", { kind: "bool", value: true, position }],
      ["false", { kind: "bool", value: false, position }],
      ["null", { kind: "null", position }],
    ] as const) {
      if (this.#text.startsWith(word, this.#index)) {
        this.#index += word.length;
        return node;
      }
    }
    throw this.#error(c === undefined ? "unexpected end of file" : `unexpected character '${c}'`);
  }

  #object(position: SourcePosition): JsonNode {
    this.#index++;
    const entries: JsonEntry[] = [];
    this.#skipSpace();
    if (this.#text[this.#index] === "}") {
      this.#index++;
      return { kind: "object", entries, position };
    }
    for (;;) {
      this.#skipSpace();
      const keyPosition = this.#position();
      if (this.#text[this.#index] !== '"')
        throw this.#error(`expected a member name, got ${this.#describeHere()}`);
      const { value: key } = this.#readString(keyPosition);
      this.#expect(":", `after member "${key}"`);
      entries.push({ key, keyPosition, value: this.#value() });
      this.#skipSpace();
      const c = this.#text[this.#index];
      this.#index++;
      if (c === "}") return { kind: "object", entries, position };
      if (c !== ",") {
        this.#index--;
        throw this.#error(`expected ',' or '}' after a member, got ${this.#describeHere()}`);
      }
    }
  }

  #array(position: SourcePosition): JsonNode {
    this.#index++;
    const items: JsonNode[] = [];
    this.#skipSpace();
    if (this.#text[this.#index] === "]") {
      this.#index++;
      return { kind: "array", items, position };
    }
    for (;;) {
      items.push(this.#value());
      this.#skipSpace();
      const c = this.#text[this.#index];
      this.#index++;
      if (c === "]") return { kind: "array", items, position };
      if (c !== ",") {
        this.#index--;
        throw this.#error(`expected ',' or ']' in a list, got ${this.#describeHere()}`);
      }
    }
  }

  #string(position: SourcePosition): JsonNode {
    return { kind: "string", ...this.#readString(position), position };
  }

  /** A quoted string: its value, and its source text for messages. */
  #readString(position: SourcePosition): { value: string; text: string } {
    const text = this.#text;
    const start = this.#index;
    this.#index++;
    let value = "";
    for (;;) {
      const c = text[this.#index];
      if (c === undefined || c === "\n") throw this.#error("unterminated string", position);
      if (c === '"') {
        this.#index++;
        return { value, text: text.slice(start, this.#index) };
      }
      if (c < " ") throw this.#error("control character in string");
      if (c !== "\\") {
        value += c;
        this.#index++;
        continue;
      }
      const e = text[this.#index + 1] ?? "";
      const simple = ESCAPES[e];
      if (simple !== undefined) {
        value += simple;
        this.#index += 2;
      } else if (e === "u" && /^[0-9a-fA-F]{4}$/.test(text.slice(this.#index + 2, this.#index + 6))) {
        value += String.fromCharCode(Number.parseInt(text.slice(this.#index + 2, this.#index + 6), 16));
        this.#index += 6;
      } else {
        throw this.#error(`invalid escape '\\${e}' in string`);
      }
    }
  }

  #number(position: SourcePosition): JsonNode {
    NUMBER.lastIndex = this.#index;
    const match = NUMBER.exec(this.#text);
    if (match === null) throw this.#error(`invalid number`);
    this.#index += match[0].length;
    const next = this.#text[this.#index];
    if (next !== undefined && /[0-9A-Za-z_.]/.test(next)) throw this.#error("invalid number", position);
    return { kind: "number", text: match[0], position };
  }
}

/** Reads a JSON document; syntax errors are ConfigErrors naming `file`, line and column. */
export function readJson(text: string, file: string): JsonNode {
  return new JsonReader(text, file).read();
}

/** A JSON node described for messages: its source for scalars, "an object" / "a list" otherwise. */
export function describeJson(node: JsonNode): string {
  switch (node.kind) {
    case "object":
      return "an object";
    case "array":
      return "a list";
    case "string":
      return node.text;
    case "number":
      return node.text;
    case "bool":
      return String(node.value);
    case "null":
      return "null";
  }
}

/** The node as compact JSON text (numbers as written): equal texts mean equal documents. */
export function jsonText(node: JsonNode): string {
  switch (node.kind) {
    case "object":
      return `{${node.entries.map((e) => `${JSON.stringify(e.key)}:${jsonText(e.value)}`).join(",")}}`;
    case "array":
      return `[${node.items.map(jsonText).join(",")}]`;
    case "string":
      return JSON.stringify(node.value);
    case "number":
      return node.text;
    case "bool":
      return String(node.value);
    case "null":
      return "null";
  }
}
