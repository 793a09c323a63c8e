import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { describe, it } from "node:test";
import { GENERATED_EXAMPLES } from "../../scripts/generate-example-models.ts";

// The example models generated in code are committed as files (so `npm start` serves them
// without a build step): they must be exactly what their generator builds today.

const ROOT = new URL("../../", import.meta.url);

describe("the committed example models equal what their generator builds", () => {
  it("covers simple, accumulator and text_embedder", () => {
    assert.deepEqual(Object.keys(GENERATED_EXAMPLES).sort(), [
      "examples/models/accumulator/1/model.onnx",
      "examples/models/simple/1/model.onnx",
      "examples/models/text_embedder/1/model.onnx",
    ]);
  });

  for (const [path, build] of Object.entries(GENERATED_EXAMPLES)) {
    it(path, () => {
      const committed = readFileSync(new URL(path, ROOT));
      const generated = Buffer.from(build());
      assert.ok(
        committed.equals(generated),
        `${path} differs from what scripts/generate-example-models.ts builds: run it and commit the result`,
      );
    });
  }
});
