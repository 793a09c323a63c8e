import assert from "node:assert/strict";
import { describe, it } from "node:test";
import {
  collectLongNumbers,
  elementSourceTexts,
  exactInteger,
  longNumberTokens,
  memberSourceText,
} from "../../src/frontends/common/json-source-text.ts";

// The scanner that reads 64-bit integers again from a request's text: JSON.parse rounds
// them past 2^53. It must map each token to its element, cost one pass over the text, and
// keep only the tokens that need it.

describe("json-source-text", () => {
  const text = `{"id": "a]\\"9", "inputs": [ {"name": "x", "data": [[1, -9007199254740993], [3, "77777777777777777"]]},
    {"name": "y", "data": [18446744073709551615, 1e300, 2.5]} ], "inputs2": [1]}`;

  it("finds a value by keys and array indices, as JSON.parse keeps it", () => {
    assert.equal(memberSourceText(text, ["inputs", 1, "name"]), '"y"');
    assert.equal(memberSourceText(text, ["inputs", 2]), undefined);
    assert.equal(memberSourceText('{"a": 1, "a": [5]}', ["a", 0]), "5");
    const inputs = elementSourceTexts(memberSourceText(text, ["inputs"]) ?? "");
    assert.equal(inputs.length, 2);
    assert.equal(
      memberSourceText(inputs[0]!, ["data"]),
      '[[1, -9007199254740993], [3, "77777777777777777"]]',
    );
  });

  it("keeps only the long number tokens, by their place among the numbers, strings skipped", () => {
    const inputs = elementSourceTexts(memberSourceText(text, ["inputs"]) ?? "");
    assert.deepEqual(
      [...longNumberTokens(memberSourceText(inputs[0]!, ["data"]) ?? "")],
      [[1, "-9007199254740993"]],
    );
    const tokens = new Map<number, string>();
    const count = collectLongNumbers("[1, 2, 3]", tokens, 0);
    assert.equal(collectLongNumbers("[18446744073709551615, 4]", tokens, count), 2);
    assert.deepEqual([...tokens], [[3, "18446744073709551615"]]);
  });

  it("reads an integer exactly within its range; refuses long digit strings by their length", () => {
    const max = (1n << 64n) - 1n;
    assert.equal(exactInteger("18446744073709551615", 0n, max), max);
    assert.equal(exactInteger("18446744073709551616", 0n, max), null);
    assert.equal(exactInteger("-1", 0n, max), null);
    assert.equal(exactInteger("1e300", 0n, max), undefined);
    assert.equal(exactInteger("2.5", 0n, max), undefined);
    assert.equal(exactInteger("9".repeat(10_000_000), 0n, max), null);
  });
});
