import type { Handler, HandlerContext, HandlerRequest, HandlerResponse, Tensor } from "seqserve";
import { closest, FEATURES, featuresOf, passagesOf } from "./passages.ts";

// The SageMaker stateful-session pattern (LLaVA on TorchServe caches an image's embedding
// when a session opens) on text: the request that opens a session sends a document once;
// the handler cuts it into passages, embeds them with the text_embedder model (through
// context.infer, so sessions' embeddings share batches) and keeps passages and embeddings
// in the session's state. Every later request sends only a question, answered with the
// passage that matches it best. The document never travels again.

const EMBEDDER = "text_embedder";
/** text_embedder's max_batch_size: longer documents are embedded in several calls. */
const ROWS_PER_CALL = 64;

const encoder = new TextEncoder();
const decoder = new TextDecoder();

const text = (tensor: Tensor | undefined): string | undefined =>
  tensor === undefined ? undefined : decoder.decode((tensor.data as Uint8Array[])[0]);

const bytes = (value: string): Tensor => ({
  datatype: "BYTES",
  shape: [1, 1],
  data: [encoder.encode(value)],
});

async function embed(context: HandlerContext, texts: readonly string[]): Promise<Float32Array> {
  const parts: Float32Array[] = [];
  for (let start = 0; start < texts.length; start += ROWS_PER_CALL) {
    const rows = texts.slice(start, start + ROWS_PER_CALL);
    const answer = await context.infer(EMBEDDER, {
      inputs: { FEATURES: { datatype: "FP32", shape: [rows.length, FEATURES], data: featuresOf(rows) } },
    });
    parts.push(answer.outputs.EMBEDDING!.data as Float32Array);
  }
  const all = new Float32Array(parts.reduce((n, p) => n + p.length, 0));
  let offset = 0;
  for (const part of parts) {
    all.set(part, offset);
    offset += part.length;
  }
  return all;
}

async function answer(request: HandlerRequest, context: HandlerContext): Promise<HandlerResponse> {
  const state = request.sequence?.state;
  if (state === undefined)
    throw new Error("session_context keeps a document per session: open a session first");
  const document = text(request.inputs.DOCUMENT);
  if (document !== undefined) {
    const passages = passagesOf(document);
    if (passages.length === 0) {
      throw Object.assign(new Error("the document has no text"), { code: "INVALID_ARG" });
    }
    const embeddings = await embed(context, passages);
    state.set("passages", passages);
    state.set("embeddings", {
      datatype: "FP32",
      shape: [passages.length, embeddings.length / passages.length],
      data: embeddings,
    });
  }
  const passages = state.get<string[]>("passages");
  const embeddings = state.get<Tensor>("embeddings");
  if (passages === undefined || embeddings === undefined) {
    throw Object.assign(new Error("this session has no document yet: send DOCUMENT first"), {
      code: "INVALID_ARG",
    });
  }
  const question = text(request.inputs.QUERY);
  const outputs: Record<string, Tensor> = {
    PASSAGES: { datatype: "INT32", shape: [1, 1], data: Int32Array.of(passages.length) },
  };
  if (question !== undefined) {
    const query = await embed(context, [question]);
    const best = closest(embeddings.data as Float32Array, embeddings.shape[1]!, query);
    outputs.ANSWER = bytes(passages[best.index]!);
    outputs.SCORE = { datatype: "FP32", shape: [1, 1], data: Float32Array.of(best.score) };
  }
  return { outputs };
}

export default {
  async execute(requests, context) {
    // Each session's request on its own: one failing does not fail the others.
    return Promise.all(requests.map((r) => answer(r, context).catch((error: Error) => error)));
  },
} satisfies Handler;
