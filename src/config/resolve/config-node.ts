import { ConfigError, type SourcePosition } from "../config-error.ts";
import {
  isParsedMessage,
  type ParsedMessage,
  type ParsedValue,
  type SourceLocations,
} from "../parsed-config.ts";

// Resolution reads a parsed config (already type-checked by its reader) through these
// wrappers. A MessageNode knows its path in the config (`sequence_batching.state[0]`)
// and can raise a ConfigError at the line where a field was written, or at its message
// when the field is missing. Completion writes defaults through it too.

export class ResolveContext {
  readonly file: string;
  readonly locations: SourceLocations;
  readonly modelName: string;
  /** Settings accepted but not acted on, for the log. */
  readonly notes: string[] = [];

  constructor(file: string, locations: SourceLocations, modelName: string) {
    this.file = file;
    this.locations = locations;
    this.modelName = modelName;
  }

  /** A ConfigError at `container[key]`, else at `container` itself, else at the file. */
  error(detail: string, container?: object, key?: string | number): ConfigError {
    let position: SourcePosition | undefined;
    if (container !== undefined) {
      if (key !== undefined) position = this.locations.get(container, key);
      position ??= this.locations.own(container);
    }
    return new ConfigError(this.file, position, detail);
  }

  note(message: string): void {
    if (!this.notes.includes(message)) this.notes.push(message);
  }
}

export class MessageNode {
  readonly ctx: ResolveContext;
  readonly value: ParsedMessage;
  /** The path of this message in the config, "" for the root. */
  readonly path: string;

  constructor(ctx: ResolveContext, value: ParsedMessage, path: string) {
    this.ctx = ctx;
    this.value = value;
    this.path = path;
  }

  pathOf(field: string): string {
    return this.path === "" ? field : `${this.path}.${field}`;
  }

  has(field: string): boolean {
    return Object.hasOwn(this.value, field);
  }

  /** Throws a ConfigError at `field` (or at this message when the field was not written). */
  fail(field: string | undefined, detail: string): never {
    throw this.ctx.error(detail, this.value, field);
  }

  /** Throws a ConfigError at item `index` of the repeated `field`. */
  failItem(field: string, index: number, detail: string): never {
    const list = this.value[field];
    if (Array.isArray(list) && this.ctx.locations.get(list, index) !== undefined) {
      throw this.ctx.error(detail, list, index);
    }
    throw this.ctx.error(detail, this.value, field);
  }

  string(field: string, fallback = ""): string {
    const value = this.value[field];
    return typeof value === "string" ? value : fallback;
  }

  bool(field: string, fallback = false): boolean {
    const value = this.value[field];
    return typeof value === "boolean" ? value : fallback;
  }

  /** A 32-bit integer or float field. */
  number(field: string, fallback = 0): number {
    const value = this.value[field];
    return typeof value === "number" ? value : fallback;
  }

  /** A 64-bit integer field. */
  bigint(field: string, fallback = 0n): bigint {
    const value = this.value[field];
    return typeof value === "bigint" ? value : fallback;
  }

  /** A 64-bit integer field as a number; too large for exact arithmetic is an error. */
  safeNumber(field: string, fallback = 0): number {
    const value = this.value[field];
    if (typeof value !== "bigint") return fallback;
    if (value > BigInt(Number.MAX_SAFE_INTEGER) || value < BigInt(Number.MIN_SAFE_INTEGER)) {
      this.fail(field, `value ${value} of field '${this.pathOf(field)}' is too large`);
    }
    return Number(value);
  }

  /** A repeated scalar field (empty when absent). */
  list(field: string): ParsedValue[] {
    const value = this.value[field];
    return Array.isArray(value) ? value : [];
  }

  /** A repeated 64-bit integer field as numbers (dims, shapes, versions). */
  safeNumbers(field: string): number[] {
    return this.list(field).map((item, i) => {
      if (
        typeof item === "bigint" &&
        item <= BigInt(Number.MAX_SAFE_INTEGER) &&
        item >= BigInt(Number.MIN_SAFE_INTEGER)
      ) {
        return Number(item);
      }
      if (typeof item === "number") return item;
      return this.failItem(
        field,
        i,
        `value ${String(item)} of field '${this.pathOf(field)}[${i}]' is too large`,
      );
    });
  }

  child(field: string): MessageNode | undefined {
    const value = this.value[field];
    return isParsedMessage(value) ? new MessageNode(this.ctx, value, this.pathOf(field)) : undefined;
  }

  /** The message at `field`, created empty when absent. */
  ensureChild(field: string): MessageNode {
    return this.child(field) ?? this.set(field, {}).child(field)!;
  }

  children(field: string): MessageNode[] {
    return this.list(field).flatMap((item, i) =>
      isParsedMessage(item) ? [new MessageNode(this.ctx, item, `${this.pathOf(field)}[${i}]`)] : [],
    );
  }

  /** A map field as its object (empty when absent). */
  map(field: string): ParsedMessage {
    const value = this.value[field];
    return isParsedMessage(value) ? value : {};
  }

  /** Writes a value (a default or a completion). */
  set(field: string, value: ParsedValue): this {
    this.value[field] = value;
    return this;
  }
}

/**
 * "[1, -1, 3]": a comma and a space between dimensions, as the model configuration
 * layer's messages write shapes (core/tensor.ts's formatShape writes "[1,-1,3]", as
 * messages about requests' tensors do).
 */
export function formatShapeSpaced(shape: readonly number[]): string {
  return `[${shape.join(", ")}]`;
}
