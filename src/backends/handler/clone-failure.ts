// What a handler's thread says when a value it hands over (a state entry, a response's
// parameters, a call's inputs, a log line's fields) cannot cross to another thread.
// V8's own message quotes the value, a function's whole source included ("function f()
// { … API_KEY … } could not be cloned."), and the message reaches the client: it is
// replaced by where the value lies and what kind it is.

const DEPTH = 16;

/** Whether `error` is V8's refusal to copy a value between threads. */
function isCloneFailure(error: unknown): boolean {
  return error instanceof Error && /could not be cloned\.?$/.test(error.message);
}

function kindOf(value: unknown): string | undefined {
  if (typeof value === "function") return `a function${value.name === "" ? "" : ` (${value.name})`}`;
  if (typeof value === "symbol") return "a symbol";
  if (value instanceof Promise) return "a promise";
  if (value instanceof WeakMap || value instanceof WeakSet || value instanceof WeakRef) {
    return `a ${value.constructor.name}`;
  }
  return undefined;
}

/** The path to the first value in `value` that cannot be copied, and its kind. */
function firstUncopyable(
  value: unknown,
  path: string,
  seen: Set<object>,
  depth: number,
): { path: string; kind: string } | undefined {
  const kind = kindOf(value);
  if (kind !== undefined) return { path, kind };
  if (value === null || typeof value !== "object" || seen.has(value) || depth > DEPTH) return undefined;
  if (ArrayBuffer.isView(value) || value instanceof ArrayBuffer) return undefined;
  seen.add(value);
  const entries: Iterable<[unknown, unknown]> =
    value instanceof Map
      ? value.entries()
      : value instanceof Set
        ? [...value].entries()
        : Object.entries(value);
  for (const [key, inner] of entries) {
    const found = firstUncopyable(
      inner,
      `${path}${Array.isArray(value) ? `[${String(key)}]` : `.${String(key)}`}`,
      seen,
      depth + 1,
    );
    if (found !== undefined) return found;
  }
  return undefined;
}

/**
 * Why `value` could not be handed over, in words that never quote it: `error` is V8's
 * refusal (isCloneFailure); other errors keep their message.
 */
export function uncopyableText(value: unknown, error: unknown): string {
  if (!isCloneFailure(error)) return error instanceof Error ? error.message : String(error);
  const found = firstUncopyable(value, "", new Set(), 0);
  const what =
    found === undefined
      ? "a value"
      : `${found.kind}${found.path === "" ? "" : ` at ${found.path.replace(/^\./, "")}`}`;
  return `it holds ${what}, which cannot be copied to another thread (functions, promises, symbols and weak references cannot)`;
}

/**
 * `value` with what cannot be copied to another thread replaced by a short description
 * (a log line's fields: the line is kept, never failed).
 */
export function copyableFields(value: unknown, seen = new Map<object, unknown>(), depth = 0): unknown {
  const kind = kindOf(value);
  if (kind !== undefined) return `[${kind}]`;
  if (value === null || typeof value !== "object") return value;
  if (ArrayBuffer.isView(value) || value instanceof ArrayBuffer || value instanceof Date) return value;
  if (value instanceof RegExp || value instanceof Error) return value;
  if (seen.has(value)) return seen.get(value);
  if (depth > DEPTH) return "[too deep]";
  if (Array.isArray(value)) {
    const copy: unknown[] = [];
    seen.set(value, copy);
    for (const inner of value) copy.push(copyableFields(inner, seen, depth + 1));
    return copy;
  }
  if (value instanceof Map) {
    const copy = new Map<unknown, unknown>();
    seen.set(value, copy);
    for (const [key, inner] of value)
      copy.set(copyableFields(key, seen, depth + 1), copyableFields(inner, seen, depth + 1));
    return copy;
  }
  if (value instanceof Set) {
    const copy = new Set<unknown>();
    seen.set(value, copy);
    for (const inner of value) copy.add(copyableFields(inner, seen, depth + 1));
    return copy;
  }
  const copy: Record<string, unknown> = {};
  seen.set(value, copy);
  for (const [key, inner] of Object.entries(value)) copy[key] = copyableFields(inner, seen, depth + 1);
  return copy;
}
