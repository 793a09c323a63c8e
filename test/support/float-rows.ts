import assert from "node:assert/strict";

// Rows of floats for large JSON bodies, written as JSON (-0 as "-0"), and the check that an
// answer holds each value exactly.

/** `rows` rows of `width` floats, each read back exactly as its FP32 value, -0 among them. */
export function floatRows(rows: number, width: number): number[][] {
  const values = Array.from({ length: rows }, (_, r) =>
    Array.from({ length: width }, (_, c) => (((r * width + c) * 7919) % 10007) / 997 - 5),
  );
  values[0]![1] = -0;
  return values;
}

/** The rows as FP32 values, which a model of FP32 answers. */
export const asFp32 = (rows: readonly (readonly number[])[]): number[][] =>
  rows.map((row) => row.map(Math.fround));

/** The rows as a JSON list of lists, -0 kept. */
export const rowsText = (rows: readonly (readonly number[])[]): string =>
  `[${rows.map((row) => `[${row.map((v) => (Object.is(v, -0) ? "-0" : String(v))).join(",")}]`).join(",")}]`;

/**
 * `served` (rows of an answer) holds exactly `expected`, -0 told from 0; each served value
 * read as `readAs` reads it (TF-Serving writes a float's 9 digits, exact once read as one).
 */
export function assertRowsExact(
  served: unknown,
  expected: readonly (readonly number[])[],
  what: string,
  readAs: (value: number) => number = (value) => value,
): void {
  const rows = served as number[][];
  assert.equal(rows.length, expected.length, what);
  for (let r = 0; r < expected.length; r++) {
    const c = expected[r]!.findIndex((v, i) => !Object.is(readAs(rows[r]![i]!), v));
    assert.equal(c, -1, `${what}: row ${r}, element ${c}: ${rows[r]?.[c]} for ${expected[r]![c]}`);
  }
}
