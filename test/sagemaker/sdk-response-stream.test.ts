import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import {
  InvokeEndpointWithResponseStreamCommand,
  type SageMakerRuntimeClient,
} from "@aws-sdk/client-sagemaker-runtime";
import type { SpeechEvent } from "../../examples/models/vad_segmenter/1/segmenter.ts";
import { decoupledCountConfig, handlerRepository } from "../handlers/support/handler-kit.ts";
import { pieces, segmenterStreams } from "../support/segmenter-oracle.ts";
import { listSequences } from "../support/sequence-kit.ts";
import { startTestServer, type TestServer } from "../support/test-server.ts";
import {
  closeSession,
  containerMessage,
  invoke,
  invokeStream,
  newSession,
  openSession,
  sdkClient,
  sdkError,
} from "./support/sagemaker-kit.ts";

// InvokeEndpointWithResponseStream, from the unmodified AWS SDK for JavaScript: a model
// with several responses per request (vad_segmenter: speech events as they happen) sends
// each as a PayloadPart, a KServe v2 JSON line, within a session opened by InvokeEndpoint,
// as SageMaker has it; the container's own /invocations answers the same lines. The
// events must be exactly those of the example's segmenter run in this process on ONNX
// Runtime's probabilities for the same audio (the oracle).

const EXAMPLES = fileURLToPath(new URL("../../examples/models", import.meta.url));
const CHUNKS = 64;
/** Not a multiple of 512: the handler carries the rest over to the next request. */
const PIECE = 1500;
const JSON_LINES = "application/jsonlines";

interface Line {
  readonly outputs?: { name: string; data: unknown[] }[];
  readonly error?: string;
}

/** The lines of JSON-lines bytes, each parsed. */
const lines = (bytes: Buffer): Line[] =>
  bytes
    .toString("utf8")
    .split("\n")
    .filter((line) => line !== "")
    .map((line) => JSON.parse(line) as Line);

function eventOf(line: Line): SpeechEvent {
  if (line.error !== undefined) throw new Error(line.error);
  const value = (name: string) => line.outputs!.find((o) => o.name === name)!.data[0];
  return { event: value("EVENT") as SpeechEvent["event"], sample: Number(value("SAMPLE")) };
}

const audioBody = (part: Float32Array, extra: Record<string, unknown> = {}): string =>
  JSON.stringify({
    ...extra,
    inputs: [{ name: "AUDIO", datatype: "FP32", shape: [1, part.length], data: [...part] }],
  });

describe("a decoupled model's session, streamed", () => {
  let server: TestServer;
  let client: SageMakerRuntimeClient;
  let audio: Float32Array[];
  let expected: SpeechEvent[][];

  before(async () => {
    server = await startTestServer(EXAMPLES, { sagemakerPort: 0 });
    client = sdkClient(server.server.sagemakerPort!);
    ({ audio, expected } = await segmenterStreams([60, 61], CHUNKS));
  });
  after(async () => {
    client?.destroy();
    await server?.stop();
  });

  it("has speech starts and ends to find", () => {
    for (const events of expected) {
      assert.ok(events.some((e) => e.event === "speech_start"));
      assert.ok(events.some((e) => e.event === "speech_end"));
    }
  });

  /** One session's events: each step streamed, the last one closing the session. */
  async function overResponseStreams(stream: number): Promise<SpeechEvent[]> {
    const { id } = await openSession(client, "vad_segmenter");
    const events: SpeechEvent[] = [];
    const parts = pieces(audio[stream]!, PIECE);
    for (const [i, part] of parts.entries()) {
      const last = i === parts.length - 1;
      const answer = await invokeStream(client, {
        body: audioBody(part, last ? { requestType: "CLOSE" } : {}),
        sessionId: id,
      });
      assert.equal(answer.error, undefined);
      assert.equal(answer.contentType, JSON_LINES);
      // One part per response: each holds one whole line.
      for (const bytes of answer.parts) {
        assert.equal(lines(bytes).length, 1);
        events.push(eventOf(lines(bytes)[0]!));
      }
    }
    return events;
  }

  /** The same through InvokeEndpoint: the container's answer holds every line of its step. */
  async function overInvocations(stream: number): Promise<SpeechEvent[]> {
    const parts = pieces(audio[stream]!, PIECE);
    const events: SpeechEvent[] = [];
    const opened = await invoke(client, {
      body: audioBody(parts[0]!),
      sessionId: "NEW_SESSION",
      targetModel: "vad_segmenter",
    });
    const { id } = newSession(opened);
    assert.equal(opened.ContentType, JSON_LINES);
    // A step that brings no event has an empty body, which the SDK gives as no Body.
    events.push(...lines(Buffer.from(opened.Body ?? [])).map(eventOf));
    for (const [i, part] of parts.slice(1).entries()) {
      const last = i === parts.length - 2;
      const answer = await invoke(client, {
        body: audioBody(part, last ? { requestType: "CLOSE" } : {}),
        sessionId: id,
        targetModel: "vad_segmenter",
      });
      if (last) assert.equal(answer.ClosedSessionId, id);
      events.push(...lines(Buffer.from(answer.Body ?? [])).map(eventOf));
    }
    return events;
  }

  it("streams each speech event as it happens, as the in-process oracle finds them, and the session ends", async () => {
    const [streamed, invoked] = await Promise.all([overResponseStreams(0), overInvocations(1)]);
    assert.deepEqual(streamed, expected[0]);
    assert.deepEqual(invoked, expected[1]);
    for (const model of ["vad_segmenter", "silero_vad_stateful"]) {
      const listing = await listSequences(server.url, model);
      assert.deepEqual(listing.sequences, [], model);
    }
  });

  it("a model with one answer per request streams it as one part, in the form InvokeEndpoint answers; a CLOSE answers as one part", async () => {
    const { id } = await openSession(client, "accumulator");
    const input = (value: number) =>
      JSON.stringify({ inputs: [{ name: "INPUT", datatype: "INT32", shape: [1, 1], data: [value] }] });
    const first = await invokeStream(client, { body: input(5), sessionId: id });
    assert.equal(first.contentType, "application/json");
    assert.equal(first.parts.length, 1);
    const sum = (bytes: Buffer) =>
      (JSON.parse(bytes.toString()) as { outputs: { data: number[] }[] }).outputs[0]!.data[0];
    assert.equal(sum(first.parts[0]!), 5);
    const second = await invokeStream(client, { body: input(3), sessionId: id });
    assert.equal(sum(second.parts[0]!), 8);
    // A CLOSE without inputs answers on the stream too: one part, the closed session.
    const closed = await invokeStream(client, {
      body: JSON.stringify({ requestType: "CLOSE" }),
      sessionId: id,
    });
    assert.equal(closed.error, undefined);
    assert.equal(closed.contentType, "application/json");
    assert.deepEqual(
      closed.parts.map((part) => JSON.parse(part.toString())),
      [{ session_id: id, closed: true }],
    );
    assert.deepEqual((await listSequences(server.url, "accumulator")).sequences, []);
  });

  it("a session is opened by InvokeEndpoint only, as in SageMaker: NEW_SESSION on the stream is refused, opening nothing", async () => {
    await assert.rejects(
      invokeStream(client, {
        body: JSON.stringify({ requestType: "NEW_SESSION" }),
        sessionId: "NEW_SESSION",
      }),
      (error: Error) => {
        assert.equal(error.name, "ValidationError");
        assert.match(error.message, /InvokeEndpointWithResponseStream cannot open a session/);
        return true;
      },
    );
    assert.deepEqual((await listSequences(server.url, "accumulator")).sequences, []);
  });
});

// Sends COUNT responses, one by one, then completes its request; for a COUNT below 0,
// sends -COUNT - 1 and fails it.
/** A request of a COUNT model's `value`, in KServe JSON. */
const count = (value: number) =>
  JSON.stringify({ inputs: [{ name: "COUNT", datatype: "INT32", shape: [1], data: [value] }] });
/** The INDEX of each JSON line the parts hold. */
const indexes = (parts: readonly Buffer[]) =>
  parts.flatMap((bytes) => lines(bytes).map((line) => line.outputs![0]!.data[0]));

const COUNTDOWN = `
export default {
  execute(requests: any[]) {
    for (const r of requests) void run(r);
  },
};
async function run(r: any) {
  const count = Number(r.inputs.COUNT.data[0]);
  for (let i = 0; i < (count < 0 ? -count - 1 : count); i++) {
    await r.send({ outputs: { INDEX: { datatype: "INT32", shape: [1], data: Int32Array.of(i) } } });
  }
  if (count < 0) r.complete(new Error("failed after its responses"));
  else r.complete();
}
`;

// A running sum per session; a negative VALUE fails its step.
const TALLY = `
export default {
  execute(requests: any[]) {
    return requests.map((r) => {
      const value = Number(r.inputs.VALUE.data[0]);
      if (value < 0) return new Error("negative input " + value);
      const sum = (r.sequence.state.get("sum") ?? 0) + value;
      r.sequence.state.set("sum", sum);
      return { outputs: { SUM: { datatype: "INT32", shape: [1], data: Int32Array.of(sum) } } };
    });
  },
};
`;

const TALLY_CONFIG = `
backend: "typescript"
max_batch_size: 0
input [ { name: "VALUE" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "SUM" data_type: TYPE_INT32 dims: [ 1 ] } ]
sequence_batching { oldest { max_candidate_sequences: 8 } }
`;

describe("a decoupled model's stream, and its failures", () => {
  let server: TestServer;
  let client: SageMakerRuntimeClient;
  before(async () => {
    const repository = handlerRepository({
      countdown: { config: decoupledCountConfig(), files: { "1/model.ts": COUNTDOWN } },
      tally: { config: TALLY_CONFIG, files: { "1/model.ts": TALLY } },
    });
    server = await startTestServer(repository.path, { sagemakerPort: 0, sagemakerModel: "countdown" });
    client = sdkClient(server.server.sagemakerPort!);
  });
  after(async () => {
    client?.destroy();
    await server?.stop();
  });

  it("each response is a part, in order", async () => {
    const answer = await invokeStream(client, { body: count(4) });
    assert.equal(answer.error, undefined);
    assert.deepEqual(indexes(answer.parts), [0, 1, 2, 3]);
  });

  it("a request that completes without a response streams no part", async () => {
    const answer = await invokeStream(client, { body: count(0) });
    assert.deepEqual(answer, { contentType: JSON_LINES, parts: [], error: undefined });
  });

  it("a failure after the first response is a ModelStreamError the SDK raises, with the model's message", async () => {
    const answer = await invokeStream(client, { body: count(-3) });
    assert.deepEqual(indexes(answer.parts), [0, 1]);
    assert.equal(answer.error?.name, "ModelStreamError");
    assert.equal(answer.error?.message, "failed after its responses");
    assert.equal((answer.error as Error & { ErrorCode?: string }).ErrorCode, "INTERNAL");
  });

  it("a failure before any response is a ModelError holding the container's 500", async () => {
    const error = await sdkError(invokeStream(client, { body: count(-1) }));
    assert.equal(error.originalStatus, 500);
    assert.equal(containerMessage(error), "failed after its responses");
  });

  it("InvokeEndpoint gets the lines, a failure after them as a last line", async () => {
    const answer = await invoke(client, { body: count(-3) });
    assert.equal(answer.ContentType, JSON_LINES);
    assert.deepEqual(lines(Buffer.from(answer.Body!)), [
      {
        model_name: "countdown",
        model_version: "1",
        outputs: [{ name: "INDEX", datatype: "INT32", shape: [1], data: [0] }],
      },
      {
        model_name: "countdown",
        model_version: "1",
        outputs: [{ name: "INDEX", datatype: "INT32", shape: [1], data: [1] }],
      },
      { error: "failed after its responses" },
    ]);
  });

  it("an Accept that JSON lines do not satisfy is refused before the model runs", async () => {
    const error = await sdkError(
      invokeStream(client, { body: count(1), accept: "application/octet-stream" }),
    );
    assert.equal(error.originalStatus, 406);
    assert.match(
      containerMessage(error),
      /no answer fits Accept 'application\/octet-stream'.*application\/jsonlines/,
    );
  });

  it("a session step the model fails is a ModelError sent once (the SDK retries 500s, not ModelErrors) and leaves the session as it was", async () => {
    const retrying = sdkClient(server.server.sagemakerPort!, undefined);
    try {
      const { id } = await openSession(retrying, "tally");
      const step = (value: number) =>
        invoke(retrying, {
          body: JSON.stringify({ inputs: [{ name: "VALUE", datatype: "INT32", shape: [1], data: [value] }] }),
          sessionId: id,
          targetModel: "tally",
        });
      const error = await sdkError(step(-1));
      assert.equal(error.originalStatus, 500);
      assert.equal(containerMessage(error), "negative input -1");
      const stats = (await (await fetch(`${server.url}/v2/models/tally/stats`)).json()) as {
        model_stats: { inference_stats: { fail: { count: number } } }[];
      };
      assert.equal(stats.model_stats[0]!.inference_stats.fail.count, 1);
      const sum = JSON.parse(Buffer.from((await step(3)).Body!).toString()) as {
        outputs: { data: number[] }[];
      };
      assert.deepEqual(sum.outputs[0]!.data, [3]);
      await closeSession(retrying, id, "tally");
    } finally {
      retrying.destroy();
    }
  });

  it("a CLOSE whose last step fails closes its session all the same, and says so", async () => {
    const { id } = await openSession(client, "tally");
    const post = (value: number, close: boolean) =>
      fetch(`http://127.0.0.1:${server.server.sagemakerPort}/invocations`, {
        method: "POST",
        headers: {
          "content-type": "application/json",
          "x-amzn-sagemaker-session-id": id,
          "x-amzn-sagemaker-target-model": "tally",
        },
        body: JSON.stringify({
          ...(close ? { requestType: "CLOSE" } : {}),
          inputs: [{ name: "VALUE", datatype: "INT32", shape: [1], data: [value] }],
        }),
      });
    // A failed step that does not close leaves the session as it was.
    assert.equal((await post(-1, false)).status, 500);
    assert.equal((await post(3, false)).status, 200);
    const failed = await post(-2, true);
    assert.equal(failed.status, 500);
    assert.equal(failed.headers.get("x-amzn-sagemaker-closed-session-id"), id);
    assert.equal(
      ((await failed.json()) as { message: string }).message,
      "negative input -2 (the session is closed all the same: a CLOSE ends its session even when its last step fails)",
    );
    const after = await post(1, false);
    assert.equal(after.status, 400);
    assert.match(((await after.json()) as { message: string }).message, /is closed/);
  });
});

// Responses numbered on from the session's count of those it sent (its state), the
// second a moment after the first; the client of a session step may take only two
// untaken responses at a time.
const SESSION_COUNTDOWN = `
export default {
  execute(requests: any[]) {
    for (const r of requests) void run(r);
  },
};
async function run(r: any) {
  const count = Number(r.inputs.COUNT.data[0]);
  const sent = r.sequence.state.get("sent") ?? 0;
  for (let i = 0; i < count; i++) {
    await r.send({ outputs: { INDEX: { datatype: "INT32", shape: [1], data: Int32Array.of(sent + i) } } });
    // Its client may leave after the first: the next ones are made after it has gone.
    if (i === 0) await new Promise((resolve) => setTimeout(resolve, 300));
  }
  r.sequence.state.set("sent", sent + count);
  r.complete();
}
`;

describe("a decoupled session step whose client leaves mid-stream", { timeout: 30_000 }, () => {
  let server: TestServer;
  let client: SageMakerRuntimeClient;
  before(async () => {
    const repository = handlerRepository({
      session_countdown: {
        config: decoupledCountConfig(`
sequence_batching { oldest { max_candidate_sequences: 4 } }
parameters { key: "handler_max_unacked_responses" value { string_value: "2" } }
`),
        files: { "1/model.ts": SESSION_COUNTDOWN },
      },
    });
    server = await startTestServer(repository.path, {
      sagemakerPort: 0,
      sagemakerModel: "session_countdown",
    });
    client = sdkClient(server.server.sagemakerPort!);
  });
  after(async () => {
    client?.destroy();
    await server?.stop();
  });

  it("runs to its end, its responses dropped rather than waited for, and the session goes on from it", async () => {
    const { id } = await openSession(client);
    const leaving = new AbortController();
    const output = await client.send(
      new InvokeEndpointWithResponseStreamCommand({
        EndpointName: "seqserve",
        Body: Buffer.from(count(50)),
        ContentType: "application/json",
        SessionId: id,
      }),
      { abortSignal: leaving.signal },
    );
    for await (const event of output.Body!) {
      if (event.PayloadPart !== undefined) break;
    }
    leaving.abort();
    // The step sent its 50 responses (no client took them) and was applied: the next one numbers on.
    const next = await invokeStream(client, { body: count(2), sessionId: id });
    assert.equal(next.error, undefined);
    assert.deepEqual(indexes(next.parts), [50, 51]);
    await closeSession(client, id);
  });

  it("a numbered step sent again is refused saying why: a decoupled model's responses are not kept to send again", async () => {
    const { id } = await openSession(client);
    const numbered = () =>
      invokeStream(client, { body: count(2), sessionId: id, customAttributes: "sequence_step=1" });
    assert.equal((await numbered()).error, undefined);
    const error = await sdkError(numbered());
    assert.equal(error.originalStatus, 400);
    assert.match(
      containerMessage(error),
      /^step 1 of sequence .* was already applied and its answer is no longer kept \(a decoupled model's responses go out as they are made, and none is kept to send again\)$/,
    );
    await closeSession(client, id);
  });
});
