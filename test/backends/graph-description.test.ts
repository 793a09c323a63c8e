import assert from "node:assert/strict";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import ort from "onnxruntime-node";
import {
  MAX_GRAPH_DESCRIPTION_BYTES,
  readGraphDescription,
} from "../../src/backends/onnx/graph-description.ts";
import { ServerError } from "../../src/core/errors.ts";
import { OnnxModelBuilder } from "../../tools/onnx/onnx-model-builder.ts";

// The graph description read from an ONNX file by walking its protobuf fields: the same
// text as the file holds, past nodes and initializers larger than the reader's window,
// with protobuf's rule that the last value written wins; files that are not ONNX refused
// in words.

let folder: string;

before(async () => {
  folder = await mkdtemp(join(tmpdir(), "seqserve-graph-description-"));
});

after(async () => {
  await rm(folder, { recursive: true, force: true });
});

/** An Identity model with a 1 MB initializer ahead of the description, and `description`. */
function model(description: string): Uint8Array {
  const weights = new Float32Array(256 * 1024).map((_, i) => i);
  return new OnnxModelBuilder({ opset: 17 })
    .input("x", "FP32", [1])
    .output("y", "FP32", [1])
    .initializer("weights", "FP32", [weights.length], weights)
    .node("Identity", ["x"], ["y"])
    .description(description)
    .toBytes();
}

async function file(name: string, bytes: Uint8Array | string): Promise<string> {
  const path = join(folder, name);
  await writeFile(path, bytes);
  return path;
}

function assertInvalid(error: unknown, includes: string): true {
  assert.ok(error instanceof ServerError, String(error));
  assert.equal(error.code, "INVALID_ARG");
  assert.ok(error.message.includes(includes), error.message);
  return true;
}

describe("readGraphDescription", () => {
  it("reads the description past an initializer larger than its window, as ONNX Runtime loads the file", async () => {
    const description = "Accumulators, état compris.\nInputState OutputState <<<s_in, s_out>>>";
    const path = await file("described.onnx", model(description));
    assert.equal(await readGraphDescription(path), description);
    // The file is a model ONNX Runtime loads and runs.
    const session = await ort.InferenceSession.create(path);
    const { y } = await session.run({ x: new ort.Tensor("float32", new Float32Array([3]), [1]) });
    assert.deepEqual(Array.from(y!.data as Float32Array), [3]);
    await session.release();
  });

  it("gives '' for a graph without a description", async () => {
    assert.equal(await readGraphDescription(await file("plain.onnx", model(""))), "");
  });

  it("takes the last description when the model's message is written twice (protobuf merges them)", async () => {
    const first = model("first");
    const second = model("second");
    const merged = new Uint8Array(first.length + second.length);
    merged.set(first);
    merged.set(second, first.length);
    assert.equal(await readGraphDescription(await file("merged.onnx", merged)), "second");
  });

  it("refuses a file that is not an ONNX model, and a description too long to be state pairs", async () => {
    const text = await file("not.onnx", "name: 'not a model'\n");
    await assert.rejects(readGraphDescription(text), (e) => assertInvalid(e, "is not an ONNX model"));
    const bytes = model("x");
    const cut = await file("cut.onnx", bytes.subarray(0, bytes.length - 100));
    await assert.rejects(readGraphDescription(cut), (e) => assertInvalid(e, "is not an ONNX model"));
    const long = await file("long.onnx", model("a".repeat(MAX_GRAPH_DESCRIPTION_BYTES + 1)));
    await assert.rejects(readGraphDescription(long), (e) =>
      assertInvalid(e, `more than the ${MAX_GRAPH_DESCRIPTION_BYTES} read for state pairs`),
    );
  });
});
