import { invalidArg } from "../../core/errors.ts";

// How deep a request's JSON may nest. JSON.parse takes about a microsecond and over a
// hundred bytes of memory per level of nesting: a body of a million `[` (a few KB once
// gzipped) held the event loop for seconds and the process for GBs before it was refused
// as a tensor. No request needs it: the deepest tensor TF-Serving takes has 254
// dimensions, within a few levels of request.

/** Levels of arrays and objects within one another that a request's JSON may have. */
export const MAX_JSON_DEPTH = 512;

const OPENING = ["[", "{"] as const;

/**
 * Throws a 400 when `text` nests arrays and objects deeper than MAX_JSON_DEPTH, before
 * anything parses it. A body with no more brackets than that in all (a tensor's flat
 * data, a few dozen rows) is told by a search for them, in about a microsecond for 10 KB;
 * others (many rows, nested data, strings holding brackets) are read character by
 * character: about half of what JSON.parse takes on rows of numbers, as much again on
 * strings full of brackets (bench/json-depth.ts). Bodies of 1 MiB or more are checked on
 * the JSON thread, where they are parsed.
 */
export function checkJsonDepth(text: string): void {
  let opening = 0;
  for (const bracket of OPENING) {
    for (let i = text.indexOf(bracket); i !== -1; i = text.indexOf(bracket, i + 1)) {
      if (++opening > MAX_JSON_DEPTH) {
        if (nestsTooDeep(text)) {
          throw invalidArg(
            `the request JSON nests arrays and objects more than ${MAX_JSON_DEPTH} levels deep; no tensor needs that many`,
          );
        }
        return;
      }
    }
  }
}

/** Whether `text` nests arrays and objects deeper than MAX_JSON_DEPTH (brackets within strings aside). */
function nestsTooDeep(text: string): boolean {
  let depth = 0;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === 0x22) {
      // A string: up to its closing quote, past escaped characters.
      for (i++; i < text.length; i++) {
        const s = text.charCodeAt(i);
        if (s === 0x5c) i++;
        else if (s === 0x22) break;
      }
    } else if (c === 0x5b || c === 0x7b) {
      if (++depth > MAX_JSON_DEPTH) return true;
    } else if (c === 0x5d || c === 0x7d) depth--;
  }
  return false;
}
