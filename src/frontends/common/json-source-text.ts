// JSON.parse turns every number into a double, so a 64-bit integer above 2^53 comes out
// rounded: a uint64 sequence id, or an INT64/UINT64 tensor element. This scanner finds
// the source text of one value of a request (a KServe request's
// `parameters.sequence_id` or `inputs[i].data`, a TF-Serving request's
// `inputs.sequence_id`), so the exact digits can be read again, or a `sequence_id`'s form
// checked. It runs only on text that JSON.parse has accepted, and only when a parsed value
// was not a safe integer or a first look finds a `sequence_id` written as a fraction.

const QUOTE = 0x22;
const BACKSLASH = 0x5c;

function skipSpace(text: string, i: number): number {
  for (;;) {
    const c = text.charCodeAt(i);
    if (c !== 0x20 && c !== 0x0a && c !== 0x0d && c !== 0x09) return i;
    i++;
  }
}

/** Index just past the string starting at `i` (which is a quote). */
function skipString(text: string, i: number): number {
  for (i++; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === BACKSLASH) i++;
    else if (c === QUOTE) return i + 1;
  }
  return i;
}

/** Index just past the value starting at `i`. */
function skipValue(text: string, i: number): number {
  const first = text[i];
  if (first === '"') return skipString(text, i);
  if (first === "{" || first === "[") {
    let depth = 0;
    while (i < text.length) {
      const c = text[i];
      if (c === '"') {
        i = skipString(text, i);
        continue;
      }
      if (c === "{" || c === "[") depth++;
      else if (c === "}" || c === "]") {
        depth--;
        if (depth === 0) return i + 1;
      }
      i++;
    }
    return i;
  }
  while (i < text.length && !",}] \n\r\t".includes(text[i] as string)) i++;
  return i;
}

/**
 * Calls `visit(key, start)` for each member of the object starting at `i`, with `start`
 * the index of the member's value; returns the index just past the object.
 */
function forEachMember(text: string, i: number, visit: (key: string, start: number) => void): number {
  i = skipSpace(text, i + 1);
  while (i < text.length && text[i] !== "}") {
    const keyEnd = skipString(text, i);
    const key = JSON.parse(text.slice(i, keyEnd)) as string;
    const start = skipSpace(text, skipSpace(text, keyEnd) + 1);
    visit(key, start);
    i = skipSpace(text, skipValue(text, start));
    if (text[i] === ",") i = skipSpace(text, i + 1);
  }
  return i + 1;
}

/** Calls `visit(start)` for each element of the array starting at `i`, with `start` the index of the element. */
function forEachElement(text: string, i: number, visit: (index: number, start: number) => void): void {
  i = skipSpace(text, i + 1);
  for (let index = 0; i < text.length && text[i] !== "]"; index++) {
    visit(index, i);
    i = skipSpace(text, skipValue(text, i));
    if (text[i] === ",") i = skipSpace(text, i + 1);
  }
}

/**
 * The source text of the value at `path` (object keys and array indices from the top,
 * e.g. ["parameters", "sequence_id"] or ["inputs", 0, "data"]) in the JSON `text` (for a
 * key given twice, the last, as JSON.parse keeps), or undefined when it is absent.
 */
export function memberSourceText(text: string, path: readonly (string | number)[]): string | undefined {
  let found: string | undefined;
  const descend = (start: number, depth: number): void => {
    const step = path[depth];
    const visit = (at: string | number, valueStart: number): void => {
      if (at !== step) return;
      if (depth === path.length - 1) found = text.slice(valueStart, skipValue(text, valueStart));
      else descend(valueStart, depth + 1);
    };
    if (typeof step === "number") {
      if (text[start] === "[") forEachElement(text, start, visit);
    } else if (text[start] === "{") forEachMember(text, start, visit);
  };
  if (path.length > 0) descend(skipSpace(text, 0), 0);
  return found;
}

/** The source texts of the elements of the JSON array whose source text is `source`. */
export function elementSourceTexts(source: string): string[] {
  const texts: string[] = [];
  const start = skipSpace(source, 0);
  if (source[start] === "[")
    forEachElement(source, start, (_, at) => texts.push(source.slice(at, skipValue(source, at))));
  return texts;
}

/**
 * Puts the number tokens longer than 15 characters of a JSON value's source text into
 * `tokens`, by their place among its numbers (strings skipped) plus `offset`; returns how
 * many numbers it holds. Shorter tokens are always read exactly, and keeping only the
 * long ones keeps a large tensor with one big value from costing a string per element.
 */
export function collectLongNumbers(source: string, tokens: Map<number, string>, offset = 0): number {
  let index = 0;
  for (let i = 0; i < source.length; ) {
    const c = source[i] as string;
    if (c === '"') i = skipString(source, i);
    else if (c === "-" || (c >= "0" && c <= "9")) {
      const end = skipValue(source, i);
      if (end - i > 15) tokens.set(offset + index, source.slice(i, end));
      index++;
      i = end;
    } else i++;
  }
  return index;
}

/** The number tokens longer than 15 characters of a JSON value's source text, by place (collectLongNumbers). */
export function longNumberTokens(source: string): Map<number, string> {
  const tokens = new Map<number, string>();
  collectLongNumbers(source, tokens);
  return tokens;
}

/**
 * The integer a JSON number token writes, exactly: a bigint within [min, max], null for
 * an integer outside it, undefined for a token not written as an integer (a fraction or
 * an exponent). Long digit strings are refused by their length before BigInt reads them:
 * BigInt takes time that grows faster than the length, and a body of millions of digits
 * stalled the server for seconds.
 */
export function exactInteger(token: string, min: bigint, max: bigint): bigint | null | undefined {
  // JSON allows no leading zeros: a sign and 20 digits hold every 64-bit integer.
  const integer = /^-?\d+$/;
  if (token.length > 21) return integer.test(token) ? null : undefined;
  if (!integer.test(token)) return undefined;
  const value = BigInt(token);
  return value < min || value > max ? null : value;
}

const SEQUENCE_ID_KEY = '"sequence_id"';
/** After a key: a number, or a list of numbers, one of them with a fraction or an exponent. */
const FRACTION_OR_EXPONENT_AFTER_KEY = /\s*:\s*\[?(?:\s*-?\d+\s*,)*\s*-?\d+[.eE]/y;

/**
 * Whether a `sequence_id` is written with a fraction or an exponent anywhere in a JSON
 * text: a first look that costs a string search (about 1.5 µs over a 10 kB Silero step;
 * a regular expression over the whole text took 4 µs).
 */
export function mayHaveSequenceIdNotInteger(text: string): boolean {
  return mayHaveNotIntegerAfter(text, SEQUENCE_ID_KEY);
}

/**
 * Whether the member named `key` (quoted, as JSON writes it) is anywhere written as a
 * number, or a list of numbers, with a fraction or an exponent (`5.0`, `[1e3]`), which
 * rapidjson reads as a double where JSON.parse gives an integer.
 */
function mayHaveNotIntegerAfter(text: string, key: string): boolean {
  return matchesAfter(text, key, FRACTION_OR_EXPONENT_AFTER_KEY);
}

/**
 * Whether `sticky` (a regular expression with the y flag) matches right after any place
 * `key` is found in `text`: a first look that costs one string search.
 */
export function matchesAfter(text: string, key: string, sticky: RegExp): boolean {
  for (let i = text.indexOf(key); i !== -1; i = text.indexOf(key, i + 1)) {
    sticky.lastIndex = i + key.length;
    if (sticky.test(text)) return true;
  }
  return false;
}
