import { randomUUID } from "node:crypto";
import { invalidArg } from "../../core/errors.ts";

// SageMaker session ids. The id is the only credential a session has, so the server
// makes it: a random UUID (122 bits from the system's CSPRNG), which matches SageMaker's
// pattern for ids, ^[a-zA-Z0-9](-*[a-zA-Z0-9])*$, at most 256 characters.

/** The value of X-Amzn-SageMaker-Session-Id that asks for a new session. */
export const NEW_SESSION = "NEW_SESSION";
const MAX_SESSION_ID_LENGTH = 256;

const SESSION_ID_PATTERN = /^[a-zA-Z0-9](-*[a-zA-Z0-9])*$/;

export function newSessionId(): string {
  return randomUUID();
}

/** `text` if it is a well-formed session id; a 400 that says it is malformed otherwise. */
export function checkSessionId(text: string): string {
  if (text.length <= MAX_SESSION_ID_LENGTH && SESSION_ID_PATTERN.test(text)) return text;
  const shown =
    text.length > 64 ? `${JSON.stringify(text.slice(0, 64)).slice(0, -1)}…"` : JSON.stringify(text);
  throw invalidArg(
    `malformed session id ${shown} (${text.length} characters): a session id is ${NEW_SESSION}, or 1 to ${MAX_SESSION_ID_LENGTH} letters, digits and hyphens that start and end with a letter or digit`,
  );
}

/** An expiry as SageMaker writes it: YYYY-MM-DDThh:mm:ssZ (UTC, whole seconds). */
export function formatExpiry(epochMs: number): string {
  return `${new Date(epochMs).toISOString().slice(0, 19)}Z`;
}

/** The value of X-Amzn-SageMaker-New-Session-Id: `<id>; Expires=<UTC time>`. */
export function newSessionHeaderValue(id: string, expiresAtMs: number): string {
  return `${id}; Expires=${formatExpiry(expiresAtMs)}`;
}
