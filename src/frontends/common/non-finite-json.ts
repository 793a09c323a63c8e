// JSON with non-finite numbers, as rapidjson reads it with kParseNanAndInfFlag, the flag
// Triton's (triton_json.h), TF-Serving's (json_tensor.cc) and OVMS's readers all use
// (and writes it with kWriteNanAndInfFlag, Triton's writer: nonFiniteText):
// `NaN`, `Inf` and `Infinity`, each with or without a leading minus, stand for a number.
// Python's json and numpy write them. JSON.parse takes none, so a text that does not parse
// is read again with each such token outside strings marked: replaced by a string no
// client sends (it starts with NUL), which the float readers take for its value.

/** The marks, and the values they stand for in a float tensor. */
export const NON_FINITE_MARKS: ReadonlyMap<string, number> = new Map([
  ["\u0000NaN", Number.NaN],
  ["\u0000Infinity", Number.POSITIVE_INFINITY],
  ["\u0000-Infinity", Number.NEGATIVE_INFINITY],
]);

/** Each token and its mark as JSON text; longer tokens first, as they share beginnings. */
const TOKENS: readonly (readonly [string, string])[] = [
  ["-Infinity", '"\\u0000-Infinity"'],
  ["Infinity", '"\\u0000Infinity"'],
  ["-Inf", '"\\u0000-Infinity"'],
  ["Inf", '"\\u0000Infinity"'],
  ["-NaN", '"\\u0000NaN"'],
  ["NaN", '"\\u0000NaN"'],
];

/** `text` with the non-finite tokens outside strings marked; undefined when it has none. */
function markNonFinite(text: string): string | undefined {
  let out = "";
  let from = 0;
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (inString) {
      if (c === 0x5c) i++;
      else if (c === 0x22) inString = false;
      continue;
    }
    if (c === 0x22) {
      inString = true;
      continue;
    }
    if (c !== 0x4e && c !== 0x49 && c !== 0x2d) continue; // N, I, -
    const found = TOKENS.find(([token]) => text.startsWith(token, i));
    // A value, not a member's name (rapidjson takes no bare name): `{NaN: 1}` stays refused.
    if (found === undefined || isMemberName(text, i + found[0].length)) continue;
    out += text.slice(from, i) + found[1];
    i += found[0].length - 1;
    from = i + 1;
  }
  return from === 0 ? undefined : out + text.slice(from);
}

/** Whether what follows `from` (past white space) is a colon: the token before it names a member. */
function isMemberName(text: string, from: number): boolean {
  let i = from;
  while (i < text.length && " \t\n\r".includes(text[i]!)) i++;
  return text[i] === ":";
}

/**
 * `text`'s JSON, its non-finite tokens marked (NON_FINITE_MARKS), with the text as parsed
 * (for exact 64-bit integers). Throws JSON.parse's error for the text as given when it
 * does not parse either way, so the error's position is the client's.
 */
export function parseJsonWithNonFinite(text: string): { readonly json: unknown; readonly text: string } {
  try {
    return { json: JSON.parse(text), text };
  } catch (error) {
    const marked = markNonFinite(text);
    if (marked === undefined) throw error;
    try {
      return { json: JSON.parse(marked), text: marked };
    } catch {
      throw error;
    }
  }
}

/** The number a marked token stands for, or undefined for any other value. */
export function nonFiniteValue(value: unknown): number | undefined {
  return typeof value === "string" ? NON_FINITE_MARKS.get(value) : undefined;
}

/** A number that JSON proper has no word for, as Triton's rapidjson writes it. */
export function nonFiniteText(value: number): string {
  return Number.isNaN(value) ? "NaN" : value > 0 ? "Infinity" : "-Infinity";
}
