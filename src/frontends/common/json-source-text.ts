// JSON.parse turns every number into a double, so a uint64 sequence id above 2^53 comes
// out rounded. This scanner finds the source text of one member of a request object (a
// KServe request's `parameters.sequence_id`, a TF-Serving request's
// `inputs.sequence_id`), so the exact digits can be read again. It runs only on text that
// JSON.parse has accepted, and only when a parsed value was not a safe integer.

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

/**
 * The source text of the member at `path` (object keys from the top, e.g.
 * ["parameters", "sequence_id"]) in the JSON `text` (the last occurrence, as JSON.parse
 * keeps), or undefined when it is absent.
 */
export function memberSourceText(text: string, path: readonly string[]): string | undefined {
  let found: string | undefined;
  const descend = (start: number, depth: number): void => {
    if (text[start] !== "{") return;
    forEachMember(text, start, (key, valueStart) => {
      if (key !== path[depth]) return;
      if (depth === path.length - 1) found = text.slice(valueStart, skipValue(text, valueStart));
      else descend(valueStart, depth + 1);
    });
  };
  if (path.length > 0) descend(skipSpace(text, 0), 0);
  return found;
}
