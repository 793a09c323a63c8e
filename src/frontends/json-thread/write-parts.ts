import type { Tensor } from "../../core/tensor.ts";
import { jsonTensorData, nestedJsonTensorData } from "../common/kserve/json-tensor.ts";
import { restTensorText, tensorRow } from "../tfs/rest-json.ts";
import { OFF_THREAD_JSON_ELEMENTS, type WritePart, writeJsonOffThread } from "./json-thread.ts";

// A response body's parts written as text: where the body is small, in place; where it
// is large, on the JSON thread. One writer for both, so they cannot differ.

function partText(part: WritePart): string {
  if (typeof part === "string") return part;
  if (!("form" in part)) return jsonTensorData(part);
  const tensor = part.row === undefined ? part.tensor : tensorRow(part.tensor, part.row);
  return part.form === "rest" ? restTensorText(part.name, tensor) : nestedJsonTensorData(tensor);
}

/** The text of a body of `parts`. */
export function partsText(parts: readonly WritePart[]): string {
  let text = "";
  for (const part of parts) text += partText(part);
  return text;
}

/** The elements of `tensors`, which a body writing them all as JSON holds. */
export function jsonElements(tensors: readonly Tensor[]): number {
  let elements = 0;
  for (const tensor of tensors) elements += tensor.data.length;
  return elements;
}

/**
 * The text of a body of `parts`, holding `elements` tensor elements: written in place, or,
 * for OFF_THREAD_JSON_ELEMENTS or more, on the JSON thread as UTF-8 bytes (a promise only then).
 */
export function writeParts(parts: readonly WritePart[], elements: number): string | Promise<Buffer> {
  return elements < OFF_THREAD_JSON_ELEMENTS ? partsText(parts) : writeJsonOffThread(parts);
}
