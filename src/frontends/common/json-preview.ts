import { nonFiniteText, nonFiniteValue } from "./non-finite-json.ts";

/**
 * The start of a client's JSON value as text, for an error message that shows what was
 * sent. A value nested too deep for JSON.stringify (it recurses, and a body of 200,000
 * brackets overflows the stack) is named by its kind instead, so the client still gets
 * its 400 rather than a 500.
 */
export function jsonPreview(value: unknown, maxChars = 64): string {
  let text: string;
  try {
    // NaN and the infinities as the client wrote them (not JSON.stringify's null, nor
    // their marks): each is stood in for by a string clients do not send, then written.
    text =
      JSON.stringify(value, (_key, v: unknown) => {
        const number = typeof v === "number" && !Number.isFinite(v) ? v : nonFiniteValue(v);
        return number === undefined ? v : `\u0001${nonFiniteText(number)}\u0001`;
      })?.replace(/"\\u0001(NaN|-?Infinity)\\u0001"/g, "$1") ?? String(value);
  } catch {
    text = Array.isArray(value) ? "an array nested too deep to show" : "an object nested too deep to show";
  }
  return text.length > maxChars ? `${text.slice(0, maxChars)}…` : text;
}
