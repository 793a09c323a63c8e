import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { existsSync, readFileSync, statSync } from "node:fs";
import { dirname } from "node:path";
import { describe, it } from "node:test";
import { promisify } from "node:util";
import { writeCompiledModule } from "../../src/backends/handler/compiled-module-file.ts";

// A compiled handler's module file lives as long as the model's instances: written once,
// readable only by the server's user, removed when the last holder lets go, or when the
// process exits first (by one exit listener, however many models were loaded).

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

  it("is removed when the process exits with it still held, with no listener warning for many models", async () => {
    const script = `
      const { register } = await import(${JSON.stringify(import.meta.resolve("tsx/esm/api"))});
      register();
      const { writeCompiledModule } = await import(${JSON.stringify(new URL("../../src/backends/handler/compiled-module-file.ts", import.meta.url).href)});
      const files = [];
      for (let i = 0; i < 20; i++) files.push(await writeCompiledModule("model.ts", "export {};", 1));
      console.log(JSON.stringify(files.map((f) => f.path)));
    `;
    const { stdout, stderr } = await promisify(execFile)(
      process.execPath,
      ["--input-type=module", "-e", script],
      {
        timeout: 60_000,
      },
    );
    const paths = JSON.parse(stdout) as string[];
    assert.equal(paths.length, 20);
    for (const path of paths) assert.equal(existsSync(dirname(path)), false, `${path} outlived the process`);
    assert.doesNotMatch(stderr, /MaxListenersExceeded/);
  });
});
