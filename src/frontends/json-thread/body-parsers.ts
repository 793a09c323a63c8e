import { isJsonObject } from "../common/http/json-body.ts";
import { mayHaveSequenceIdNotInteger } from "../common/json-source-text.ts";
import { parseRequestJson, requestJsonText } from "../common/json-syntax.ts";
import { flattenLeaves } from "../common/kserve/json-tensor.ts";
import {
  mayHaveSpecialInputNotInteger,
  packRestTensors,
  parseRestJsonBody,
  restJsonText,
} from "../tfs/rest-json.ts";
import type { ParseFindings, ParseForm } from "./json-thread.ts";
import { type PackedLeaves, packLeaves, packNested } from "./packed-json.ts";

// A body's JSON read as its family reads it (its refusals in the family's words), and its
// tensors' data packed for the move back (packed-json.ts). The JSON thread does both; the
// main thread only parses, for a body whose value could not come back from the thread.

export interface ParsedBody {
  readonly object: unknown;
  readonly findings: ParseFindings;
}

/** How deep a bare array is packed (deeper ones are read on the main thread, unpacked). */
const MAX_ARRAY_RANK = 64;

/** The first `length` bytes of a body of `form` as text, refused in the family's words if not UTF-8. */
export function bodyText(form: ParseForm, body: Buffer, length: number): string {
  return form === "tfs" ? restJsonText(body, length) : requestJsonText(body, length);
}

/** The JSON of a body of `form`. */
export function parseBody(form: ParseForm, text: string): ParsedBody {
  switch (form) {
    case "kserve":
      return {
        object: parseRequestJson(text),
        findings: { sequenceIdsAreIntegers: !mayHaveSequenceIdNotInteger(text) },
      };
    case "tfs":
      return {
        object: parseRestJsonBody(text).json,
        findings: { specialInputsAreIntegers: !mayHaveSpecialInputNotInteger(text) },
      };
    case "array":
      return { object: parseRequestJson(text), findings: {} };
  }
}

/** KServe: each input's `data`, flat or nested, as its packed leaves. */
function packInferInputs(object: unknown, packed: (leaves: PackedLeaves) => void): void {
  if (!isJsonObject(object) || !Array.isArray(object.inputs)) return;
  for (const input of object.inputs) {
    if (!isJsonObject(input) || !Array.isArray(input.data)) continue;
    const leaves = packLeaves(Array.isArray(input.data[0]) ? flattenLeaves(input.data) : input.data);
    if (leaves === undefined) continue;
    input.data = leaves;
    packed(leaves);
  }
}

/** The parsed value with its tensors' data packed (in place where it can), `packed` told of each. */
export function packBody(form: ParseForm, object: unknown, packed: (leaves: PackedLeaves) => void): unknown {
  switch (form) {
    case "kserve":
      packInferInputs(object, packed);
      return object;
    case "tfs":
      packRestTensors(object, packed);
      return object;
    case "array": {
      const array = packNested(object, MAX_ARRAY_RANK);
      if (array === undefined) return object;
      packed(array.leaves);
      return array;
    }
  }
}
