import assert from "node:assert/strict";
import { existsSync, readFileSync, statSync } from "node:fs";
import { dirname } from "node:path";
import { describe, it } from "node:test";
import { writeCompiledModule } from "../../src/backends/handler/compiled-module-file.ts";

// A compiled handler's module file lives as long as the model's instances: written once,
// readable only by the server's user, removed when the last holder lets go.

describe("a compiled handler module's file", () => {
  it("is written privately, named after the handler, and removed by its last holder", async () => {
    const file = await writeCompiledModule("/models/m/1/model.ts", "export const x = 1;\n", 2);
    try {
      assert.match(file.path, /seqserve-handler-[^/\\]+[/\\]model\.mjs$/);
      assert.equal(readFileSync(file.path, "utf8"), "export const x = 1;\n");
      assert.equal(statSync(file.path).mode & 0o777, 0o600);
      file.release();
      assert.ok(existsSync(file.path), "one instance still holds it");
      file.release();
      for (let i = 0; i < 100 && existsSync(dirname(file.path)); i++)
        await new Promise((r) => setTimeout(r, 10));
      assert.equal(existsSync(dirname(file.path)), false, "its folder is gone");
    } finally {
      file.release();
    }
  });
});
