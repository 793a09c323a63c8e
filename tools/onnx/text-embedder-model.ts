import { seeded } from "../../src/bench/seeded-random.ts";
import { OnnxModelBuilder } from "./onnx-model-builder.ts";

// A small text embedding model for the session_context example: hashed word and
// character-trigram counts (computed by the caller, as a tokenizer would be) projected by
// a fixed random matrix and normalised to unit length, so the dot product of two
// embeddings approximates the cosine similarity of the texts' features.

export const TEXT_FEATURES = 1024;
export const TEXT_EMBEDDING = 128;

export function textEmbedderModel(): Uint8Array {
  const random = seeded(0x7e47);
  const projection = new Float32Array(TEXT_FEATURES * TEXT_EMBEDDING);
  for (let i = 0; i < projection.length; i++) projection[i] = (random() * 2 - 1) / Math.sqrt(TEXT_EMBEDDING);
  return new OnnxModelBuilder({ opset: 17 })
    .input("FEATURES", "FP32", ["batch", TEXT_FEATURES])
    .output("EMBEDDING", "FP32", ["batch", TEXT_EMBEDDING])
    .initializer("projection", "FP32", [TEXT_FEATURES, TEXT_EMBEDDING], projection)
    .initializer("epsilon", "FP32", [], Float32Array.of(1e-12))
    .node("MatMul", ["FEATURES", "projection"], ["projected"])
    .node("ReduceL2", ["projected"], ["length"], { axes: [1], keepdims: 1 })
    .node("Add", ["length", "epsilon"], ["safe_length"])
    .node("Div", ["projected", "safe_length"], ["EMBEDDING"])
    .toBytes();
}
