import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { checkJsonDepth, MAX_JSON_DEPTH } from "../../src/frontends/common/json-depth.ts";

// JSON nested past MAX_JSON_DEPTH is refused before anything parses it; brackets within
// strings (escaped quotes included) are not nesting, and many brackets side by side are not
// depth.

const nested = (depth: number, open = "[", close = "]") => `${open.repeat(depth)}1${close.repeat(depth)}`;
const refusal =
  /^the request JSON nests arrays and objects more than 512 levels deep; no tensor needs that many$/;

describe("checkJsonDepth", () => {
  it("takes JSON as deep as the limit, arrays and objects alike", () => {
    assert.equal(MAX_JSON_DEPTH, 512);
    checkJsonDepth(nested(512));
    checkJsonDepth(`${'{"a":['.repeat(256)}1${"]}".repeat(256)}`);
  });

  it("refuses JSON one level deeper, however its levels are made", () => {
    for (const text of [
      nested(513),
      `${'{"a":['.repeat(256)}{}${"]}".repeat(256)}`,
      `[${nested(512)}]`,
      nested(1_000_000),
      // Malformed past the limit: still refused for its depth, not parsed.
      "[".repeat(600),
    ]) {
      assert.throws(
        () => checkJsonDepth(text),
        (error: Error) => refusal.test(error.message),
      );
    }
  });

  it("counts no bracket within a string, past escaped quotes and backslashes", () => {
    checkJsonDepth(`["${"[".repeat(10_000)}"]`);
    checkJsonDepth(`["\\"${"{".repeat(10_000)}", "\\\\", ${nested(500)}]`);
    assert.throws(
      () => checkJsonDepth(`["\\\\", ${nested(600)}]`),
      (error: Error) => refusal.test(error.message),
    );
  });

  it("takes many brackets side by side: they are not depth", () => {
    checkJsonDepth(`{"instances":[${Array(100_000).fill("[1,2]").join(",")}]}`);
  });
});
