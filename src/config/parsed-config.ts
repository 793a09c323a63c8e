import type { SourcePosition } from "./config-error.ts";

// A model configuration as read from its file, before defaults and validation: a plain
// object shaped like inference.ModelConfig with proto field names (snake_case), whatever
// the file's format. Scalars keep their protobuf kind: 32-bit integers and floats are
// numbers, 64-bit integers are bigints (exact beyond 2^53), enums are their value names,
// maps are objects keyed by the map key (in decimal for integer keys). A field that was
// not written is absent, so "unset" and "written as the default" stay distinguishable.
//
// Where each value came from is kept beside the object, so that resolution, which
// happens later and elsewhere, can still point at the line of a bad value.

/**
 * How deep a config text may nest objects, lists and messages. The readers recurse once
 * per level, so without a bound a text nested some thousands deep (say a load request's
 * `config`) overflows the stack and reaches the client as an internal error. A real model
 * config nests fewer than 10 deep (inference.ModelConfig's messages go 6 deep); 100
 * leaves room and stays far below what the stack holds.
 */
export const MAX_CONFIG_NESTING = 100;
export const NESTING_TOO_DEEP = `nesting deeper than ${MAX_CONFIG_NESTING} levels`;

export type ParsedScalar = string | number | bigint | boolean;
export type ParsedValue = ParsedScalar | ParsedMessage | ParsedValue[];
export interface ParsedMessage {
  [field: string]: ParsedValue;
}

type ConfigFormat = "pbtxt" | "json" | "ovms";

export interface ParsedModelConfig {
  /** The file named in messages. */
  readonly file: string;
  readonly format: ConfigFormat;
  /** The root inference.ModelConfig message. */
  readonly message: ParsedMessage;
  readonly locations: SourceLocations;
}

/** Source positions of the values in a parsed tree, by container and key. */
export class SourceLocations {
  #entries = new WeakMap<object, Map<string | number, SourcePosition>>();
  #own = new WeakMap<object, SourcePosition>();

  /** Records where `container[key]` was written (a field name, array index or map key). */
  set(container: object, key: string | number, position: SourcePosition): void {
    let entries = this.#entries.get(container);
    if (entries === undefined) {
      entries = new Map();
      this.#entries.set(container, entries);
    }
    entries.set(key, position);
  }

  get(container: object, key: string | number): SourcePosition | undefined {
    return this.#entries.get(container)?.get(key);
  }

  /** Records where a message, list or map itself starts. */
  setOwn(container: object, position: SourcePosition): void {
    this.#own.set(container, position);
  }

  own(container: object): SourcePosition | undefined {
    return this.#own.get(container);
  }

  /** Makes `copy` answer with the positions of `original` (for a cloned tree). */
  alias(original: object, copy: object): void {
    const entries = this.#entries.get(original);
    if (entries !== undefined) this.#entries.set(copy, new Map(entries));
    const own = this.#own.get(original);
    if (own !== undefined) this.#own.set(copy, own);
  }
}

/**
 * Sets `target[key]` as an own property, whatever the key. A map field takes any string
 * as a key, and plain assignment of "__proto__" would set the object's prototype instead
 * of adding the entry: the entry would be lost and a second one pass the duplicate check.
 */
export function setEntry<T>(target: Record<string, T>, key: string, value: T): void {
  Object.defineProperty(target, key, { value, enumerable: true, writable: true, configurable: true });
}

export function isParsedMessage(value: ParsedValue | undefined): value is ParsedMessage {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/** A deep copy of `value`; the copy's containers keep the original's source positions. */
export function cloneParsed<T extends ParsedValue>(value: T, locations: SourceLocations): T {
  if (Array.isArray(value)) {
    const copy = value.map((item) => cloneParsed(item, locations));
    locations.alias(value, copy);
    return copy as T;
  }
  if (isParsedMessage(value)) {
    const copy: ParsedMessage = {};
    for (const [key, item] of Object.entries(value)) setEntry(copy, key, cloneParsed(item, locations));
    locations.alias(value, copy);
    return copy as T;
  }
  return value;
}
