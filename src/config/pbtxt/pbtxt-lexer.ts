import { ConfigError, type SourcePosition } from "../config-error.ts";

// Splits protobuf text format into tokens: identifiers, numbers, quoted strings and the
// punctuation { } < > [ ] : , ; -. A minus sign is its own token so that "- 5" and
// "-inf" read the way protobuf reads them. Comments run from # to the end of the line.

export type Token =
  | (SourcePosition & { readonly kind: "identifier"; readonly text: string })
  | (SourcePosition & { readonly kind: "integer"; readonly text: string; readonly value: bigint })
  | (SourcePosition & { readonly kind: "float"; readonly text: string; readonly value: number })
  | (SourcePosition & { readonly kind: "string"; readonly text: string; readonly value: string })
  | (SourcePosition & { readonly kind: "symbol"; readonly text: string })
  | (SourcePosition & { readonly kind: "eof"; readonly text: "" });

const SYMBOLS = new Set(["{", "}", "<", ">", "[", "]", ":", ",", ";", "-"]);
const SIMPLE_ESCAPES: Record<string, number> = {
  n: 0x0a,
  t: 0x09,
  r: 0x0d,
  a: 0x07,
  b: 0x08,
  f: 0x0c,
  v: 0x0b,
  "\\": 0x5c,
  "'": 0x27,
  '"': 0x22,
  "?": 0x3f,
};

const isDigit = (c: string | undefined): boolean => c !== undefined && c >= "0" && c <= "9";
const isHexDigit = (c: string | undefined): boolean => c !== undefined && /^[0-9a-fA-F]$/.test(c);
const isIdentifierStart = (c: string | undefined): boolean => c !== undefined && /^[A-Za-z_]$/.test(c);
const isIdentifierPart = (c: string | undefined): boolean => c !== undefined && /^[A-Za-z0-9_]$/.test(c);

export class PbtxtLexer {
  readonly #text: string;
  readonly #file: string;
  #index = 0;
  #line = 1;
  #lineStart = 0;

  constructor(text: string, file: string) {
    this.#text = text;
    this.#file = file;
  }

  /** Every token of the text, ending with an "eof" token. */
  tokenize(): Token[] {
    const tokens: Token[] = [];
    for (;;) {
      const token = this.#next();
      tokens.push(token);
      if (token.kind === "eof") return tokens;
    }
  }

  #position(index = this.#index): SourcePosition {
    return { line: this.#line, column: index - this.#lineStart + 1 };
  }

  #error(detail: string, position: SourcePosition = this.#position()): ConfigError {
    return new ConfigError(this.#file, position, detail);
  }

  #skipSpaceAndComments(): void {
    const text = this.#text;
    while (this.#index < text.length) {
      const c = text[this.#index];
      if (c === "\n") {
        this.#index++;
        this.#line++;
        this.#lineStart = this.#index;
      } else if (c === " " || c === "\t" || c === "\r" || c === "\f" || c === "\v") {
        this.#index++;
      } else if (c === "#") {
        while (this.#index < text.length && text[this.#index] !== "\n") this.#index++;
      } else {
        return;
      }
    }
  }

  #next(): Token {
    this.#skipSpaceAndComments();
    const position = this.#position();
    const text = this.#text;
    const c = text[this.#index];
    if (c === undefined) return { kind: "eof", text: "", ...position };
    if (c === '"' || c === "'") return this.#string(position);
    if (isDigit(c) || (c === "." && isDigit(text[this.#index + 1]))) return this.#number(position);
    if (isIdentifierStart(c)) {
      const start = this.#index;
      while (isIdentifierPart(text[this.#index])) this.#index++;
      return { kind: "identifier", text: text.slice(start, this.#index), ...position };
    }
    if (SYMBOLS.has(c)) {
      this.#index++;
      return { kind: "symbol", text: c, ...position };
    }
    throw this.#error(`unexpected character '${c}'`);
  }

  #number(position: SourcePosition): Token {
    const text = this.#text;
    const start = this.#index;
    if (text[start] === "0" && (text[start + 1] === "x" || text[start + 1] === "X")) {
      this.#index += 2;
      while (isHexDigit(text[this.#index])) this.#index++;
      const literal = text.slice(start, this.#index);
      if (literal.length === 2 || isIdentifierPart(text[this.#index])) {
        throw this.#error(`invalid number '${this.#wordFrom(start)}'`, position);
      }
      return { kind: "integer", text: literal, value: BigInt(literal), ...position };
    }
    let isFloat = false;
    while (isDigit(text[this.#index])) this.#index++;
    if (text[this.#index] === ".") {
      isFloat = true;
      this.#index++;
      while (isDigit(text[this.#index])) this.#index++;
    }
    if (text[this.#index] === "e" || text[this.#index] === "E") {
      const sign = text[this.#index + 1] === "+" || text[this.#index + 1] === "-" ? 1 : 0;
      if (isDigit(text[this.#index + 1 + sign])) {
        isFloat = true;
        this.#index += 1 + sign;
        while (isDigit(text[this.#index])) this.#index++;
      }
    }
    const digits = text.slice(start, this.#index);
    if (text[this.#index] === "f" || text[this.#index] === "F") {
      isFloat = true;
      this.#index++;
    }
    if (isIdentifierPart(text[this.#index]) || text[this.#index] === ".") {
      throw this.#error(`invalid number '${this.#wordFrom(start)}'`, position);
    }
    const literal = text.slice(start, this.#index);
    if (isFloat) return { kind: "float", text: literal, value: Number(digits), ...position };
    if (digits.length > 1 && digits.startsWith("0")) {
      if (!/^0[0-7]+$/.test(digits)) throw this.#error(`invalid octal number '${digits}'`, position);
      return { kind: "integer", text: literal, value: BigInt(`0o${digits.slice(1)}`), ...position };
    }
    return { kind: "integer", text: literal, value: BigInt(digits), ...position };
  }

  /** The run of word characters from `start`, for messages about a malformed number. */
  #wordFrom(start: number): string {
    let end = start;
    while (end < this.#text.length && /[A-Za-z0-9_.+-]/.test(this.#text[end] ?? "")) end++;
    return this.#text.slice(start, end);
  }

  #string(position: SourcePosition): Token {
    const text = this.#text;
    const quote = text[this.#index];
    const start = this.#index;
    this.#index++;
    const bytes: number[] = [];
    for (;;) {
      const c = text[this.#index];
      if (c === undefined || c === "\n") throw this.#error("unterminated string", position);
      if (c === quote) {
        this.#index++;
        break;
      }
      if (c !== "\\") {
        // Keep surrogate pairs together so non-BMP characters encode correctly.
        const codePoint = text.codePointAt(this.#index) ?? 0;
        const char = String.fromCodePoint(codePoint);
        bytes.push(...Buffer.from(char, "utf8"));
        this.#index += char.length;
        continue;
      }
      this.#escape(bytes);
    }
    const value = Buffer.from(bytes).toString("utf8");
    return { kind: "string", text: text.slice(start, this.#index), value, ...position };
  }

  #escape(bytes: number[]): void {
    const text = this.#text;
    const escapePosition = this.#position();
    const c = text[this.#index + 1];
    if (c === undefined || c === "\n") throw this.#error("unterminated string", escapePosition);
    const simple = SIMPLE_ESCAPES[c];
    if (simple !== undefined) {
      bytes.push(simple);
      this.#index += 2;
      return;
    }
    if (c === "x" || c === "X") {
      let end = this.#index + 2;
      while (end < this.#index + 4 && isHexDigit(text[end])) end++;
      if (end === this.#index + 2)
        throw this.#error("invalid escape '\\x' in string: expected hex digits", escapePosition);
      bytes.push(Number.parseInt(text.slice(this.#index + 2, end), 16));
      this.#index = end;
      return;
    }
    if (c >= "0" && c <= "7") {
      let end = this.#index + 1;
      while (end < this.#index + 4 && (text[end] ?? "") >= "0" && (text[end] ?? "") <= "7") end++;
      const value = Number.parseInt(text.slice(this.#index + 1, end), 8);
      if (value > 0xff)
        throw this.#error(
          `invalid octal escape '\\${text.slice(this.#index + 1, end)}' in string`,
          escapePosition,
        );
      bytes.push(value);
      this.#index = end;
      return;
    }
    if (c === "u" || c === "U") {
      const width = c === "u" ? 4 : 8;
      const hex = text.slice(this.#index + 2, this.#index + 2 + width);
      if (hex.length !== width || !/^[0-9a-fA-F]+$/.test(hex)) {
        throw this.#error(`invalid escape '\\${c}' in string: expected ${width} hex digits`, escapePosition);
      }
      let codePoint = Number.parseInt(hex, 16);
      if (codePoint > 0x10ffff)
        throw this.#error(`invalid code point '\\${c}${hex}' in string`, escapePosition);
      this.#index += 2 + width;
      // A high surrogate followed by a \u low surrogate is one character written as its
      // UTF-16 pair (\uD83D\uDE00 is U+1F600), which protobuf's C++ tokenizer joins too.
      const low = text.startsWith("\\u", this.#index) ? text.slice(this.#index + 2, this.#index + 6) : "";
      if (codePoint >= 0xd800 && codePoint <= 0xdbff && /^[dD][c-fC-F][0-9a-fA-F]{2}$/.test(low)) {
        codePoint = 0x10000 + ((codePoint - 0xd800) << 10) + (Number.parseInt(low, 16) - 0xdc00);
        this.#index += 6;
      }
      bytes.push(...Buffer.from(String.fromCodePoint(codePoint), "utf8"));
      return;
    }
    throw this.#error(`invalid escape '\\${c}' in string`, escapePosition);
  }
}
