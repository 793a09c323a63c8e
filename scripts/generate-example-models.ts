// Writes the example models that are generated in code (the Silero VAD models are the
// published Silero VAD v5 file, see examples/models/SILERO_VAD.md).
// Run: node --import tsx scripts/generate-example-models.ts
import { writeOnnxModel } from "../tools/onnx/onnx-model-builder.ts";
import { accumulatorModel } from "../tools/onnx/sequence-models.ts";
import { addSubModel } from "../tools/onnx/test-models.ts";
import { textEmbedderModel } from "../tools/onnx/text-embedder-model.ts";

export const GENERATED_EXAMPLES: Readonly<Record<string, () => Uint8Array>> = {
  "examples/models/simple/1/model.onnx": () => addSubModel("INT32", [-1, 16]),
  "examples/models/accumulator/1/model.onnx": () => accumulatorModel(),
  "examples/models/text_embedder/1/model.onnx": () => textEmbedderModel(),
};

if (import.meta.url === `file://${process.argv[1]}`) {
  for (const [path, build] of Object.entries(GENERATED_EXAMPLES)) await writeOnnxModel(path, build());
}
