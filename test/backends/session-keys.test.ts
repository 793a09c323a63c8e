import assert from "node:assert/strict";
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { SessionKeys } from "../../src/backends/onnx/session-keys.ts";
import { onnxSessionOptions } from "../../src/backends/onnx/session-options.ts";

// Which loads may share an ONNX Runtime session on a worker thread: the same bytes with
// the same options, each file alone in its folder (external data would sit beside it), and
// never a file that changed since the session was made from it.

let root = "";
let folders = 0;
before(async () => {
  root = await mkdtemp(join(tmpdir(), "seqserve-session-keys-"));
});
after(() => rm(root, { recursive: true, force: true }));

/** Writes `bytes` as model.onnx in a folder of its own (with `beside` files next to it); its path. */
async function model(bytes: Uint8Array, beside: Record<string, string> = {}): Promise<string> {
  const dir = join(root, `m${++folders}`);
  await mkdir(dir);
  for (const [name, text] of Object.entries(beside)) await writeFile(join(dir, name), text);
  const path = join(dir, "model.onnx");
  await writeFile(path, bytes);
  return path;
}

const bytes = (fill: number, size = 4096): Uint8Array => new Uint8Array(size).fill(fill);
const options = onnxSessionOptions({}, undefined);

describe("SessionKeys", () => {
  test("byte-identical files alone in their folders share a key; a file of the same size with other bytes does not", async () => {
    const keys = new SessionKeys();
    const a = await keys.keyFor(await model(bytes(1)), options);
    const copy = await keys.keyFor(await model(bytes(1)), options);
    const other = await keys.keyFor(await model(bytes(2)), options);
    assert.equal(copy, a);
    assert.notEqual(other, a);
  });

  test("the same file loaded again, unchanged, has its key; with other session options it does not", async () => {
    const keys = new SessionKeys();
    const path = await model(bytes(3));
    const first = await keys.keyFor(path, options);
    assert.equal(await keys.keyFor(path, options), first);
    assert.notEqual(await keys.keyFor(path, { ...options, graphOptimizationLevel: "basic" }), first);
    assert.notEqual(await keys.keyFor(await model(bytes(3)), { ...options, intraOpNumThreads: 2 }), first);
  });

  test("a file with anything beside it (external data) shares with no other load, not even of itself", async () => {
    const keys = new SessionKeys();
    const alone = await keys.keyFor(await model(bytes(4)), options);
    const withData = await model(bytes(4), { "weights.bin": "a" });
    const first = await keys.keyFor(withData, options);
    assert.notEqual(first, alone);
    assert.notEqual(await keys.keyFor(withData, options), first);
    assert.notEqual(await keys.keyFor(await model(bytes(4), { "weights.bin": "a" }), options), first);
  });

  test("a file changed since its sessions were made is not theirs: neither its new bytes nor a copy of them share their key", async () => {
    const keys = new SessionKeys();
    const path = await model(bytes(5));
    const before = await keys.keyFor(path, options);
    await writeFile(path, bytes(6));
    const copyOfNew = await keys.keyFor(await model(bytes(6)), options);
    assert.notEqual(copyOfNew, before, "a copy of the new bytes is not the old session");
    const changed = await keys.keyFor(path, options);
    assert.notEqual(changed, before, "the changed file is not the old session");
    assert.equal(changed, copyOfNew, "the changed file and the copy of its bytes are one session");
  });

  test("a file that cannot be read gets a key of its own: its load fails in the worker", async () => {
    const keys = new SessionKeys();
    const missing = join(root, "missing", "model.onnx");
    const first = await keys.keyFor(missing, options);
    assert.notEqual(await keys.keyFor(missing, options), first);
    assert.ok(await keys.keyFor(await model(bytes(7)), options), "later keys are still given");
  });
});
