import type protobuf from "protobufjs";
import { ConfigError, type SourcePosition } from "../config-error.ts";
import {
  type FieldSpec,
  fieldSpecOf,
  mapEntrySpecs,
  mapKeyString,
  oneofMessage,
  oneofRival,
} from "../field-spec.ts";
import { suggestion } from "../field-suggestion.ts";
import { findField, modelConfigType, typeDisplayName, type ValueType } from "../model-config-schema.ts";
import {
  MAX_CONFIG_NESTING,
  NESTING_TOO_DEEP,
  type ParsedMessage,
  type ParsedModelConfig,
  type ParsedScalar,
  type ParsedValue,
  SourceLocations,
  setEntry,
} from "../parsed-config.ts";
import { convertScalar, type Literal } from "../scalar-value.ts";
import { PbtxtLexer, type Token } from "./pbtxt-lexer.ts";

// Protobuf text format (config.pbtxt) read against the ModelConfig schema. The schema
// decides how each value is read: a message field takes `{ }` or `< >` (the colon is
// optional), a scalar field takes `: value`, a repeated field may repeat or take a
// `[a, b]` list, a map field takes `{ key: k value: v }` entries. Fields may be
// separated by `,` or `;`. Every value's position is recorded for later messages.

/** Where a block of fields ends, and what opened it (for "missing '}'"). */
interface Block {
  readonly close: "}" | ">";
  readonly opener: Token;
  readonly label: string;
}

export class PbtxtParser {
  readonly #file: string;
  readonly #tokens: Token[];
  readonly #locations = new SourceLocations();
  #index = 0;
  /** Messages open around the field being read (the top-level one has no braces and is not counted). */
  #depth = 0;

  constructor(text: string, file: string) {
    this.#file = file;
    this.#tokens = new PbtxtLexer(text, file).tokenize();
  }

  /** Reads the whole text as one message of `type` (inference.ModelConfig by default). */
  parse(type: protobuf.Type = modelConfigType()): ParsedModelConfig {
    const message: ParsedMessage = {};
    this.#locations.setOwn(message, { line: 1, column: 1 });
    this.#fields(
      message,
      (name) => this.#specIn(type, name),
      typeDisplayName(type),
      undefined,
      () => Object.keys(type.fields),
    );
    return { file: this.#file, format: "pbtxt", message, locations: this.#locations };
  }

  #peek(): Token {
    return this.#tokens[this.#index] ?? (this.#tokens.at(-1) as Token);
  }

  #take(): Token {
    const token = this.#peek();
    if (token.kind !== "eof") this.#index++;
    return token;
  }

  #isSymbol(text: string): boolean {
    const token = this.#peek();
    return token.kind === "symbol" && token.text === text;
  }

  #takeSymbol(text: string): boolean {
    if (!this.#isSymbol(text)) return false;
    this.#index++;
    return true;
  }

  #error(position: SourcePosition, detail: string): ConfigError {
    return new ConfigError(this.#file, at(position), detail);
  }

  #describe(token: Token): string {
    return token.kind === "eof" ? "end of file" : `'${token.text}'`;
  }

  #specIn(type: protobuf.Type, name: string): FieldSpec | undefined {
    const field = findField(type, name);
    return field === undefined ? undefined : fieldSpecOf(field);
  }

  /** Reads fields into `target` until the block closes (or the file ends, at top level). */
  #fields(
    target: ParsedMessage,
    specOf: (name: string) => FieldSpec | undefined,
    typeName: string,
    block: Block | undefined,
    knownNames: () => Iterable<string> = () => [],
  ): void {
    for (;;) {
      const token = this.#peek();
      if (block !== undefined && token.kind === "symbol" && token.text === block.close) {
        this.#index++;
        return;
      }
      if (token.kind === "eof") {
        if (block === undefined) return;
        const { line, column } = block.opener;
        throw this.#error(
          token,
          `missing '${block.close}' to close '${block.label}' opened at ${line}:${column}`,
        );
      }
      if (token.kind !== "identifier") {
        throw this.#error(token, `expected a field name, got ${this.#describe(token)}`);
      }
      const spec = specOf(token.text);
      if (spec === undefined) {
        throw this.#error(
          token,
          `unknown field '${token.text}' in ${typeName}${suggestion(token.text, knownNames())}`,
        );
      }
      this.#index++;
      this.#field(target, spec, token);
      if (!this.#takeSymbol(",")) this.#takeSymbol(";");
    }
  }

  #field(target: ParsedMessage, spec: FieldSpec, nameToken: Token): void {
    const { shape } = spec;
    const isMessage = shape.value.kind === "message" || shape.kind === "map";
    const hasColon = this.#takeSymbol(":");
    if (!isMessage && !hasColon) {
      throw this.#error(
        this.#peek(),
        `expected ':' after field '${spec.name}', got ${this.#describe(this.#peek())}`,
      );
    }
    if (shape.kind === "single") {
      if (Object.hasOwn(target, spec.name)) throw this.#error(nameToken, `field '${spec.name}' given twice`);
      const rival = oneofRival(spec, target);
      if (rival !== undefined) throw this.#error(nameToken, oneofMessage(spec, rival));
      if (this.#isSymbol("[")) {
        throw this.#error(this.#peek(), `field '${spec.name}' is not repeated, so it cannot take a list`);
      }
      target[spec.name] = this.#value(spec.name, shape.value);
      this.#locations.set(target, spec.name, at(nameToken));
      return;
    }
    if (shape.kind === "repeated") {
      let list = target[spec.name];
      if (!Array.isArray(list)) {
        list = [];
        target[spec.name] = list;
        this.#locations.set(target, spec.name, at(nameToken));
        this.#locations.setOwn(list, at(nameToken));
      }
      const items = list;
      this.#oneOrList(spec.name, (position) => {
        const value = this.#value(spec.name, shape.value);
        this.#locations.set(items, items.length, at(position));
        items.push(value);
      });
      return;
    }
    let map = target[spec.name];
    if (map === undefined) {
      map = {};
      target[spec.name] = map;
      this.#locations.set(target, spec.name, at(nameToken));
      this.#locations.setOwn(map, at(nameToken));
    }
    const entries = map as ParsedMessage;
    const entrySpecs = mapEntrySpecs(shape.key, shape.value);
    this.#oneOrList(spec.name, (position) => {
      const entry = this.#message(
        spec.name,
        (name) => (name === "key" || name === "value" ? entrySpecs[name] : undefined),
        `${spec.name} entry`,
        () => ["key", "value"],
      );
      const key = mapKeyString((entry.key as ParsedScalar | undefined) ?? defaultScalar(shape.key));
      // A key given again replaces its earlier entry, as protobuf's text parsers (and so
      // Triton) keep the last; Triton's own test configs rely on it.
      setEntry(entries, key, entry.value ?? defaultValue(shape.value));
      this.#locations.set(entries, key, this.#locations.get(entry, "value") ?? at(position));
    });
  }

  /** Runs `readOne` once, or for each item of a `[ ... ]` list. */
  #oneOrList(field: string, readOne: (position: SourcePosition) => void): void {
    if (!this.#isSymbol("[")) {
      readOne(this.#peek());
      return;
    }
    const opener = this.#take();
    if (this.#takeSymbol("]")) return;
    for (;;) {
      readOne(this.#peek());
      if (this.#takeSymbol("]")) return;
      const token = this.#peek();
      if (token.kind === "eof") {
        throw this.#error(
          token,
          `missing ']' to close the list of '${field}' opened at ${opener.line}:${opener.column}`,
        );
      }
      if (!this.#takeSymbol(",")) {
        throw this.#error(
          token,
          `expected ',' or ']' in the list of '${field}', got ${this.#describe(token)}`,
        );
      }
    }
  }

  #value(field: string, type: ValueType): ParsedValue {
    if (type.kind === "message") {
      const messageType = type.messageType;
      return this.#message(
        field,
        (name) => this.#specIn(messageType, name),
        typeDisplayName(messageType),
        () => Object.keys(messageType.fields),
      );
    }
    const position = this.#peek();
    const literal = this.#literal(field);
    const converted = convertScalar(type, literal, field, { textFormat: true });
    if (!converted.ok) throw this.#error(position, converted.message);
    return converted.value;
  }

  #message(
    field: string,
    specOf: (name: string) => FieldSpec | undefined,
    typeName: string,
    knownNames: () => Iterable<string>,
  ): ParsedMessage {
    const opener = this.#take();
    if (opener.kind !== "symbol" || (opener.text !== "{" && opener.text !== "<")) {
      throw this.#error(opener, `expected '{' to start field '${field}', got ${this.#describe(opener)}`);
    }
    // Only a message type that contains itself can nest this deep (inference.ModelConfig
    // cannot), but any type may be read.
    if (this.#depth === MAX_CONFIG_NESTING) throw this.#error(opener, NESTING_TOO_DEEP);
    this.#depth++;
    const message: ParsedMessage = {};
    this.#locations.setOwn(message, at(opener));
    const close = opener.text === "{" ? "}" : ">";
    this.#fields(message, specOf, typeName, { close, opener, label: field }, knownNames);
    this.#depth--;
    return message;
  }

  /** One scalar literal: a (signed) number, a word, or adjacent strings joined. */
  #literal(field: string): Literal {
    const token = this.#take();
    if (token.kind === "symbol" && token.text === "-") {
      const next = this.#take();
      if (next.kind === "integer") return { kind: "integer", value: -next.value, text: `-${next.text}` };
      if (next.kind === "float") return { kind: "float", value: -next.value, text: `-${next.text}` };
      if (next.kind === "identifier") return { kind: "identifier", text: `-${next.text}` };
      throw this.#error(
        next,
        `expected a number after '-' for field '${field}', got ${this.#describe(next)}`,
      );
    }
    switch (token.kind) {
      case "integer":
        return { kind: "integer", value: token.value, text: token.text };
      case "float":
        return { kind: "float", value: token.value, text: token.text };
      case "identifier":
        return { kind: "identifier", text: token.text };
      case "string": {
        let value = token.value;
        let text = token.text;
        for (let next = this.#peek(); next.kind === "string"; next = this.#peek()) {
          value += next.value;
          text += ` ${next.text}`;
          this.#index++;
        }
        return { kind: "string", value, text };
      }
      default:
        throw this.#error(token, `expected a value for field '${field}', got ${this.#describe(token)}`);
    }
  }
}

/** Just the position of a token. */
function at(position: SourcePosition): SourcePosition {
  return { line: position.line, column: position.column };
}

function defaultScalar(type: ValueType): ParsedScalar {
  if (type.kind === "scalar") {
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
  if (type.kind === "enum") return type.enumType.valuesById[0] ?? "";
  return "";
}

function defaultValue(type: ValueType): ParsedValue {
  return type.kind === "message" ? {} : defaultScalar(type);
}

/** Reads a config.pbtxt text. `file` is the name used in error messages. */
export function parsePbtxt(text: string, file: string): ParsedModelConfig {
  return new PbtxtParser(text, file).parse();
}
