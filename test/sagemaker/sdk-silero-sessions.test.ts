import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { after, before, describe, it } from "node:test";
import type { SageMakerRuntimeClient } from "@aws-sdk/client-sagemaker-runtime";
import { accumulatorModel } from "../../tools/onnx/sequence-models.ts";
import { accumulatorConfig, listSequences } from "../support/sequence-kit.ts";
import {
  expectedBits,
  firstMismatch,
  fp32Bits,
  SILERO_PATH,
  SILERO_STATEFUL_CONFIG,
  SILERO_STATEFUL_MODEL,
  sequenceAudio,
} from "../support/silero-oracle.ts";
import { startTestServer, type TestServer } from "../support/test-server.ts";
import {
  binaryAnswer,
  closeSession,
  invoke,
  jsonAnswer,
  newSession,
  openSession,
  sdkClient,
  sileroBinaryBody,
  sileroJsonBody,
} from "./support/sagemaker-kit.ts";

// The AWS SDK for JavaScript, unmodified, runs SageMaker stateful sessions against a
// running seqserve: a session is a sequence of Silero VAD v5 whose recurrent state the
// server keeps, so each request sends only its new audio. What the session answers must
// be, bit for bit, what ONNX Runtime in this process answers for the same chunks fed one
// after the other with the state carried by hand (the oracle).

const MODEL = SILERO_STATEFUL_MODEL;
const CHUNKS = 20;

let server: TestServer;
let client: SageMakerRuntimeClient;
before(async () => {
  server = await startTestServer(
    {
      [MODEL]: { config: SILERO_STATEFUL_CONFIG, onnx: readFileSync(SILERO_PATH) },
      // A second model, so every request here names its TargetModel, as on a multi-model endpoint.
      accumulator: {
        config: accumulatorConfig("accumulator", 4, "direct { }"),
        onnx: accumulatorModel(),
      },
    },
    { sagemakerPort: 0, httpPort: 0 },
  );
  client = sdkClient(server.server.sagemakerPort!);
});
after(async () => {
  client?.destroy();
  await server?.stop();
});

const outputBits = (outputs: Map<string, Buffer>): number => outputs.get("output")!.readUInt32LE(0);

describe("SageMaker sessions through the AWS SDK for JavaScript", { timeout: 120_000 }, () => {
  it("open → 20 Silero VAD chunks → close answers as the stateful oracle, and frees the state", async () => {
    const audio = sequenceAudio(11, CHUNKS);
    const [expected] = await expectedBits([audio]);
    const session = await openSession(client, MODEL);
    const listed = (await listSequences(server.url, MODEL)).sequences.find((s) => s.id === session.id);
    assert.equal(listed?.steps, 0);
    assert.equal(listed?.expiresAt, new Date(session.expiresAtMs).toISOString());

    const served: number[] = [];
    for (const chunk of audio) {
      const { body, contentType } = sileroBinaryBody(chunk);
      const output = await invoke(client, { body, contentType, sessionId: session.id, targetModel: MODEL });
      assert.equal(output.NewSessionId, undefined);
      assert.equal(output.ClosedSessionId, undefined);
      served.push(outputBits(binaryAnswer(output)));
    }
    assert.equal(firstMismatch(0, served, expected!), undefined);
    const live = (await listSequences(server.url, MODEL)).sequences.find((s) => s.id === session.id);
    assert.equal(live?.steps, CHUNKS);
    assert.equal(live?.stateBytes, 1024);

    const closed = await closeSession(client, session.id, MODEL);
    assert.equal(closed.ClosedSessionId, session.id);
    assert.deepEqual(jsonAnswer(closed), { session_id: session.id, closed: true });
    const after = await listSequences(server.url, MODEL);
    assert.equal(
      after.sequences.find((s) => s.id === session.id),
      undefined,
    );
    assert.equal(after.summary.state_bytes, 0);
    assert.equal(after.summary.ended.end, 1);
  });

  it("two sessions interleaved on one model keep their own state; open and close may carry the first and last chunk", async () => {
    const audio = [sequenceAudio(21, CHUNKS), sequenceAudio(22, CHUNKS)];
    const expected = await expectedBits(audio);
    const served: number[][] = [[], []];
    const ids: string[] = [];
    const jsonOutput = (answer: unknown): number => {
      const outputs = (answer as { outputs: { name: string; data: number[] }[] }).outputs;
      return fp32Bits(outputs.find((o) => o.name === "output")!.data[0]!);
    };
    // Both open with their first chunk in the NEW_SESSION body (KServe v2 JSON this time).
    for (const s of [0, 1]) {
      const output = await invoke(client, {
        body: sileroJsonBody(audio[s]![0]!, { requestType: "NEW_SESSION" }),
        sessionId: "NEW_SESSION",
        targetModel: MODEL,
      });
      ids.push(newSession(output).id);
      served[s]!.push(jsonOutput(jsonAnswer(output)));
    }
    assert.notEqual(ids[0], ids[1]);
    for (let c = 1; c < CHUNKS; c++) {
      // Interleaved, and concurrently: each session's state must go with its own id.
      const last = c === CHUNKS - 1;
      const outputs = await Promise.all(
        [0, 1].map((s) =>
          invoke(client, {
            body: sileroJsonBody(audio[s]![c]!, last ? { requestType: "CLOSE" } : {}),
            sessionId: ids[s]!,
            targetModel: MODEL,
          }),
        ),
      );
      outputs.forEach((output, s) => {
        served[s]!.push(jsonOutput(jsonAnswer(output)));
        assert.equal(output.ClosedSessionId, last ? ids[s] : undefined);
      });
    }
    assert.deepEqual(
      served.map((bits, s) => firstMismatch(s, bits, expected[s]!)),
      [undefined, undefined],
    );
    const listing = await listSequences(server.url, MODEL);
    assert.deepEqual(
      listing.sequences.filter((s) => ids.includes(s.id as string)),
      [],
    );
    assert.equal(listing.summary.state_bytes, 0);
  });
});
