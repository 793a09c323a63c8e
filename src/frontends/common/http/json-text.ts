import type { FastifyReply } from "fastify";

// JSON text for values that may hold bigints. JSON.stringify refuses bigints, and
// converting them to numbers would round uint64 values above 2^53 (sequence ids);
// here they are written as the exact digits of a JSON integer.

function write(value: unknown, parts: string[]): void {
  switch (typeof value) {
    case "bigint":
      parts.push(value.toString());
      return;
    case "string":
    case "number":
    case "boolean":
      // JSON.stringify writes non-finite numbers as null, keeping the text valid JSON.
      parts.push(JSON.stringify(value));
      return;
    case "object":
      break;
    default:
      parts.push("null");
      return;
  }
  if (value === null) {
    parts.push("null");
    return;
  }
  if (Array.isArray(value)) {
    parts.push("[");
    for (let i = 0; i < value.length; i++) {
      if (i > 0) parts.push(",");
      write(value[i], parts);
    }
    parts.push("]");
    return;
  }
  parts.push("{");
  let first = true;
  for (const [key, member] of Object.entries(value)) {
    if (member === undefined || typeof member === "function") continue;
    if (!first) parts.push(",");
    first = false;
    parts.push(JSON.stringify(key), ":");
    write(member, parts);
  }
  parts.push("}");
}

/** Like JSON.stringify, with bigints written as exact integers. */
export function toJsonText(value: unknown): string {
  const parts: string[] = [];
  write(value, parts);
  return parts.join("");
}

/**
 * Answers with JSON `text` as `application/json`, as Triton types its answers: sent as
 * bytes, since Fastify adds `; charset=utf-8` to a text body's type (the AWS SDKs hand
 * the type to the caller, who may compare it).
 */
export function sendJsonText(reply: FastifyReply, text: string): FastifyReply {
  return reply.type("application/json").send(Buffer.from(text, "utf8"));
}

/** Answers with `value` as JSON (bigints exact). */
export function sendJson(reply: FastifyReply, value: unknown): FastifyReply {
  return sendJsonText(reply, toJsonText(value));
}
