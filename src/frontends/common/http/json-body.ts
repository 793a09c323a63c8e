import { invalidArg } from "../../../core/errors.ts";
import { parseRequestJson, requestJsonText } from "../json-syntax.ts";

// Small JSON request bodies (repository control): optional, and an object when present.

export type JsonObject = Record<string, unknown>;

export function isJsonObject(value: unknown): value is JsonObject {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/** The body as a JSON object; undefined for an empty body. */
export function readJsonBody(body: Buffer | undefined): JsonObject | undefined {
  if (body === undefined || body.byteLength === 0) return undefined;
  const json = parseRequestJson(requestJsonText(body, body.byteLength));
  if (!isJsonObject(json)) throw invalidArg("failed to parse the request JSON buffer: expected an object");
  return json;
}
