import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, it } from "node:test";
import { SIGNATURE_MAX_ENTRIES, sourceSignature } from "../../src/repository/source-signature.ts";

// A model folder's fingerprint is taken at every poll round, for every model, and at each
// load request of a model already serving: it must not hold the event loop while it walks
// a large folder. Walked synchronously, a folder bundling a Python venv (4,160 entries)
// held it some 65 ms, and a poll round over 12 of them 0.8 s, with no request answered.

const base = mkdtempSync(join(tmpdir(), "seqserve-signature-"));
after(() => rmSync(base, { recursive: true, force: true }));

/** A handler model's folder with `1/venv/p{1..64}/f{1..64}`: 4,160 entries below `1`. */
function venvModel(name: string): string {
  const dir = join(base, name);
  for (let p = 1; p <= 64; p++) {
    mkdirSync(join(dir, "1", "venv", `p${p}`), { recursive: true });
    for (let f = 1; f <= 64; f++) writeFileSync(join(dir, "1", "venv", `p${p}`, `f${f}`), "");
  }
  writeFileSync(join(dir, "1", "model.ts"), "export default {};\n");
  writeFileSync(join(dir, "config.pbtxt"), 'backend: "typescript"\n');
  return dir;
}

describe("the fingerprint of a model folder bundling a venv (more files than the bound)", () => {
  const dir = venvModel("venv");

  it("lets the event loop turn while it walks the folder", async () => {
    // One callback per turn of the loop, from the walk's start to its end: a walk that
    // never yields ends before the first runs.
    let turns = 0;
    let walking = true;
    const turn = () => {
      if (!walking) return;
      turns++;
      setImmediate(turn);
    };
    setImmediate(turn);
    const signature = await sourceSignature({ name: "venv", dir });
    walking = false;
    assert.equal(signature.truncated, true);
    assert.ok(turns > 0, "the event loop did not turn during the walk");
  });

  it(`is the same for the same folder, and still sees a change in its shallow files past ${SIGNATURE_MAX_ENTRIES} entries`, async () => {
    const first = await sourceSignature({ name: "venv", dir });
    assert.deepEqual(await sourceSignature({ name: "venv", dir }), first);
    writeFileSync(join(dir, "1", "model.ts"), "export default { changed: true };\n");
    const changed = await sourceSignature({ name: "venv", dir });
    assert.equal(changed.truncated, true);
    assert.notEqual(changed.value, first.value);
  });
});
