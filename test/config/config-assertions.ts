import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";
import { ConfigError } from "../../src/config/index.ts";

export const FIXTURES = fileURLToPath(new URL("../fixtures/configs/", import.meta.url));

export interface ExpectedConfigError {
  readonly file: string;
  readonly line?: number;
  readonly column?: number;
  /** Text the message must contain (each of them). */
  readonly includes: string | readonly string[];
}

/** Runs `action`, which must throw a ConfigError at the expected place saying the expected thing. */
export function assertConfigError(action: () => unknown, expected: ExpectedConfigError): ConfigError {
  let thrown: unknown;
  try {
    action();
  } catch (error) {
    thrown = error;
  }
  assert.ok(thrown instanceof ConfigError, `expected a ConfigError, got ${String(thrown)}`);
  assert.equal(thrown.code, "INVALID_ARG");
  assert.equal(thrown.file, expected.file);
  if (expected.line !== undefined) {
    assert.equal(thrown.position?.line, expected.line, `line of: ${thrown.message}`);
    assert.ok(thrown.message.startsWith(`${expected.file}:${expected.line}:`), thrown.message);
  }
  if (expected.column !== undefined)
    assert.equal(thrown.position?.column, expected.column, `column of: ${thrown.message}`);
  const parts = typeof expected.includes === "string" ? [expected.includes] : expected.includes;
  for (const part of parts)
    assert.ok(thrown.message.includes(part), `"${thrown.message}" should include "${part}"`);
  return thrown;
}
