import { ServerError } from "../core/errors.ts";

// A mistake in a model configuration. The message starts with where it is, the way
// compilers report (`models/m/config.pbtxt:7:3: unknown field ...`), so an operator can
// jump to it; the parts stay available as fields for callers that format differently.
// It is an INVALID_ARG ServerError so a failed load can travel to clients unchanged.

export interface SourcePosition {
  /** 1-based. */
  readonly line: number;
  /** 1-based, in characters. */
  readonly column: number;
}

export class ConfigError extends ServerError {
  readonly file: string;
  readonly position: SourcePosition | undefined;
  /** The message without the location prefix. */
  readonly detail: string;

  constructor(file: string, position: SourcePosition | undefined, detail: string) {
    const where = position === undefined ? file : `${file}:${position.line}:${position.column}`;
    super("INVALID_ARG", `${where}: ${detail}`);
    this.name = "ConfigError";
    this.file = file;
    this.position = position;
    this.detail = detail;
  }
}
