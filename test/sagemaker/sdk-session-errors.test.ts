import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { after, before, describe, it } from "node:test";
import {
  InvokeEndpointCommand,
  type InvokeEndpointCommandInput,
  type SageMakerRuntimeClient,
} from "@aws-sdk/client-sagemaker-runtime";
import { accumulatorModel } from "../../tools/onnx/sequence-models.ts";
import { addSubModel } from "../../tools/onnx/test-models.ts";
import { simpleConfig, simpleInputs } from "../e2e/support/serving.ts";
import { infer } from "../support/http-client.ts";
import { accumulatorConfig, int32Input, listSequences, waitFor } from "../support/sequence-kit.ts";
import { startTestServer, type TestServer } from "../support/test-server.ts";
import {
  closeSession,
  containerMessage,
  invoke,
  jsonAnswer,
  NEW_SESSION_ID,
  newSession,
  openSession,
  sdkClient,
  sdkError,
} from "./support/sagemaker-kit.ts";

// What the AWS SDK sees of session ids and models: NewSessionId's format and expiry; a
// ModelError holding the container's 400 that says whether an id is closed, expired or
// unknown (a malformed one is SageMaker's own ValidationError);
// which model a request goes to (TargetModel, the only model); and the refusals that
// keep sessions sound (a model with no per-session state, a full backlog, sequence fields
// of a client's own).

const TTL_SECS = 600;
const value = (n: number): string => JSON.stringify([n]);
/** The accumulator's answer to a bare-array request: its OUTPUT, nested [[n]]. */
const sumOf = (output: Parameters<typeof jsonAnswer>[0]): number =>
  (jsonAnswer(output) as number[][])[0]![0]!;

let server: TestServer;
let client: SageMakerRuntimeClient;
before(async () => {
  server = await startTestServer(
    {
      accumulator: {
        config: accumulatorConfig("accumulator", 4, "direct { }"),
        onnx: accumulatorModel(),
      },
      simple: { config: simpleConfig("simple"), onnx: addSubModel("INT32", [-1, 16]) },
      one_slot: {
        config: accumulatorConfig(
          "one_slot",
          1,
          "direct { }",
          'parameters { key: "sequence_backlog_limit" value { string_value: "1" } }',
        ),
        onnx: accumulatorModel(),
      },
    },
    { sagemakerPort: 0, sagemakerSessionTtlSecs: TTL_SECS },
  );
  client = sdkClient(server.server.sagemakerPort!);
});
after(async () => {
  client?.destroy();
  await server?.stop();
});

describe("session ids", { timeout: 60_000 }, () => {
  it("NewSessionId is '<UUID v4>; Expires=<UTC>', the TTL after opening, as the sequences API shows", async () => {
    const before = Date.now();
    const session = await openSession(client, "accumulator");
    const after = Date.now();
    assert.ok(session.id.length <= 256);
    // Whole seconds, rounded up: at least the TTL, at most a second more.
    assert.ok(session.expiresAtMs >= before + TTL_SECS * 1000, `${session.expiresAtMs} vs ${before}`);
    assert.ok(session.expiresAtMs <= after + TTL_SECS * 1000 + 1000, `${session.expiresAtMs} vs ${after}`);
    const listed = (await listSequences(server.url, "accumulator")).sequences.find(
      (s) => s.id === session.id,
    );
    assert.equal(listed?.expiresAt, new Date(session.expiresAtMs).toISOString());
    const other = await openSession(client, "accumulator");
    assert.notEqual(other.id, session.id);
    await closeSession(client, session.id);
    await closeSession(client, other.id);
  });

  it("a session's requests use its state; the header alone opens one, without a body of its own", async () => {
    const opened = await invoke(client, {
      body: value(5),
      sessionId: "NEW_SESSION",
      targetModel: "accumulator",
    });
    assert.match(opened.NewSessionId!, NEW_SESSION_ID);
    assert.equal(sumOf(opened), 5);
    const { id } = newSession(opened);
    // No TargetModel: the session is found wherever it lives.
    assert.equal(sumOf(await invoke(client, { body: value(3), sessionId: id })), 8);
    assert.equal(
      sumOf(await invoke(client, { body: value(10), sessionId: id, targetModel: "accumulator" })),
      18,
    );
    const closed = await invoke(client, {
      body: JSON.stringify({
        requestType: "CLOSE",
        inputs: [{ name: "INPUT", datatype: "INT32", shape: [1, 1], data: [2] }],
      }),
      sessionId: id,
    });
    assert.equal(closed.ClosedSessionId, id);
    const answer = jsonAnswer(closed) as { outputs: { data: number[] }[] };
    assert.deepEqual(answer.outputs[0]!.data, [20]);
  });

  it("a closed id: a ModelError, the container's 400 saying it is closed", async () => {
    const opened = await invoke(client, {
      body: value(5),
      sessionId: "NEW_SESSION",
      targetModel: "accumulator",
      customAttributes: "sequence_step=1",
    });
    const { id } = newSession(opened);
    const close = JSON.stringify({
      requestType: "CLOSE",
      inputs: [{ name: "INPUT", datatype: "INT32", shape: [1, 1], data: [1] }],
    });
    const first = await invoke(client, { body: close, sessionId: id, customAttributes: "sequence_step=2" });
    const closedSum = (answer: typeof first): number[] =>
      (jsonAnswer(answer) as { outputs: { data: number[] }[] }).outputs[0]!.data;
    assert.deepEqual(closedSum(first), [6]);
    // The numbered CLOSE retried (its answer lost) gets that answer again, also without a
    // state store: the server keeps the answers of a sequence ended by its END a while.
    const retried = await invoke(client, { body: close, sessionId: id, customAttributes: "sequence_step=2" });
    assert.equal(retried.ClosedSessionId, id);
    assert.deepEqual(closedSum(retried), [6]);
    // Anything else, or the CLOSE unnumbered, hears that the session is closed.
    for (const [body, customAttributes] of [
      [value(1), undefined],
      [JSON.stringify({ requestType: "CLOSE" }), undefined],
      [close, undefined],
      [value(1), "sequence_step=3"],
    ] as const) {
      const error = await sdkError(
        invoke(client, {
          body,
          sessionId: id,
          ...(customAttributes === undefined ? {} : { customAttributes }),
        }),
      );
      assert.equal(error.originalStatus, 400);
      assert.match(
        containerMessage(error),
        new RegExp(`^session '${id}' is closed \\(closed at .*Z\\): open a new session with NEW_SESSION$`),
      );
    }
  });

  it("an unknown id: 400 saying it is unknown", async () => {
    const id = randomUUID();
    const error = await sdkError(
      invoke(client, { body: value(1), sessionId: id, targetModel: "accumulator" }),
    );
    assert.equal(error.originalStatus, 400);
    assert.match(
      containerMessage(error),
      new RegExp(`^unknown session id '${id}': no session with this id is open`),
    );
  });

  it("malformed ids: SageMaker's own 400 ValidationError saying they are malformed", async () => {
    for (const id of ["bad_id", "-leading", "trailing-", "a".repeat(257), "white space"]) {
      const error = await sdkError(
        invoke(client, { body: value(1), sessionId: id, targetModel: "accumulator" }),
      );
      assert.deepEqual([error.name, error.status], ["ValidationError", 400], id);
      assert.match(
        error.message,
        /^malformed session id ".*" \(\d+ characters\): a session id is NEW_SESSION, or 1 to 256 letters/,
      );
    }
  });

  it("CLOSE without an id, a bad requestType, and sequence fields in a session request are refused", async () => {
    const noId = await sdkError(
      invoke(client, { body: JSON.stringify({ requestType: "CLOSE" }), targetModel: "accumulator" }),
    );
    assert.match(containerMessage(noId), /"requestType": "CLOSE" needs the id of the session to close/);
    const badType = await sdkError(
      invoke(client, { body: JSON.stringify({ requestType: "OPEN" }), targetModel: "accumulator" }),
    );
    assert.match(
      containerMessage(badType),
      /Unable to parse 'requestType': expected "NEW_SESSION" or "CLOSE", got "OPEN"/,
    );
    const { id } = await openSession(client, "accumulator");
    const ownFields = await sdkError(
      invoke(client, {
        body: JSON.stringify({
          parameters: { sequence_id: 7, sequence_start: true },
          inputs: [{ name: "INPUT", datatype: "INT32", shape: [1, 1], data: [1] }],
        }),
        sessionId: id,
      }),
    );
    assert.match(containerMessage(ownFields), /a session request must not carry sequence parameters/);
    await closeSession(client, id);
  });
});

describe("which model", { timeout: 60_000 }, () => {
  it("TargetModel picks the model (an artifact name like 'accumulator.tar.gz' too); without it a multi-model server asks for one", async () => {
    const opened = await invoke(client, {
      body: value(4),
      sessionId: "NEW_SESSION",
      targetModel: "accumulator.tar.gz",
    });
    const { id } = newSession(opened);
    assert.equal(sumOf(opened), 4);
    const listed = await listSequences(server.url, "accumulator");
    assert.ok(listed.sequences.some((s) => s.id === id));

    const none = await sdkError(invoke(client, { body: value(1), sessionId: "NEW_SESSION" }));
    assert.equal(none.originalStatus, 400);
    assert.match(
      containerMessage(none),
      /this server serves 3 models \('accumulator', 'one_slot', 'simple'\): name one with TargetModel/,
    );
    const unknown = await sdkError(invoke(client, { body: value(1), targetModel: "nope" }));
    assert.equal(unknown.originalStatus, 404);
    assert.match(containerMessage(unknown), /nope/);
    const elsewhere = await sdkError(
      invoke(client, { body: value(1), sessionId: id, targetModel: "one_slot" }),
    );
    assert.match(
      containerMessage(elsewhere),
      new RegExp(`^session '${id}' belongs to model 'accumulator', not to TargetModel 'one_slot'$`),
    );
    await closeSession(client, id, "accumulator");
  });

  it("InferenceComponentName names the model of a request without TargetModel; InvokedProductionVariant is answered", async () => {
    const send = (input: Partial<InvokeEndpointCommandInput>) =>
      client.send(
        new InvokeEndpointCommand({
          EndpointName: "seqserve",
          ContentType: "application/json",
          Body: Buffer.from(JSON.stringify({ inputs: simpleInputs(Array(16).fill(1), Array(16).fill(2)) })),
          ...input,
        }),
      );
    const component = await send({ InferenceComponentName: "simple" });
    assert.equal(component.InvokedProductionVariant, "AllTraffic");
    const sums = (JSON.parse(Buffer.from(component.Body!).toString()) as { outputs: { data: number[] }[] })
      .outputs[0]!.data;
    assert.deepEqual(sums, Array(16).fill(3));
    const variant = await send({ InferenceComponentName: "simple", TargetVariant: "blue" });
    assert.equal(variant.InvokedProductionVariant, "blue");
  });

  it("a refusal written before the request reaches a route (a head too large) is an error the SDK reads", async () => {
    const error = await sdkError(
      invoke(client, { body: value(1), targetModel: "simple", customAttributes: "x".repeat(20_000) }),
    );
    assert.deepEqual([error.name, error.status], ["ValidationError", 431]);
    assert.match(error.message, /^the request head is larger than the limit of \d+ bytes$/);
  });

  it("a model with no per-session state cannot open a session; a stateful one needs a session", async () => {
    const stateless = await sdkError(
      invoke(client, {
        body: JSON.stringify({ requestType: "NEW_SESSION" }),
        sessionId: "NEW_SESSION",
        targetModel: "simple",
      }),
    );
    assert.equal(stateless.originalStatus, 400);
    assert.match(
      containerMessage(stateless),
      /^model 'simple' keeps no per-session state \(it is not served with sequence batching\), so it cannot open a session$/,
    );
    const sessionless = await sdkError(invoke(client, { body: value(1), targetModel: "accumulator" }));
    assert.match(
      containerMessage(sessionless),
      /^model 'accumulator' keeps state per session: open a session/,
    );
    // A stateless model serves plain invocations.
    const rows = Array.from({ length: 16 }, (_, i) => i);
    const sum = await invoke(client, {
      body: JSON.stringify({
        inputs: [
          { name: "INPUT0", datatype: "INT32", shape: [1, 16], data: rows },
          { name: "INPUT1", datatype: "INT32", shape: [1, 16], data: rows },
        ],
        outputs: [{ name: "OUTPUT0" }],
      }),
      targetModel: "simple",
    });
    assert.deepEqual(
      (jsonAnswer(sum) as { outputs: { data: number[] }[] }).outputs[0]!.data,
      rows.map((r) => 2 * r),
    );
  });

  it("when every slot and the backlog are taken, opening is refused with the container's 503", async () => {
    const first = await openSession(client, "one_slot");
    const second = await openSession(client, "one_slot");
    const full = await sdkError(openSession(client, "one_slot"));
    assert.equal(full.originalStatus, 503);
    assert.match(
      containerMessage(full),
      /model 'one_slot' has all 1 sequence slots in use and its backlog of 1 sequences is full/,
    );
    await closeSession(client, first.id);
    // The backlogged session got the slot and works.
    assert.equal(sumOf(await invoke(client, { body: value(6), sessionId: second.id })), 6);
    await closeSession(client, second.id);
  });
});

describe("expiry", { timeout: 60_000 }, () => {
  let short: TestServer;
  let shortClient: SageMakerRuntimeClient;
  before(async () => {
    short = await startTestServer(
      {
        accumulator: {
          config: accumulatorConfig("accumulator", 4, "direct { }"),
          onnx: accumulatorModel(),
        },
        held: {
          config: accumulatorConfig(
            "held",
            1,
            "direct { }\n  max_sequence_idle_microseconds: 60000000",
            'parameters { key: "sequence_backlog_limit" value { string_value: "1" } }',
          ),
          onnx: accumulatorModel(),
        },
      },
      { sagemakerPort: 0, sagemakerSessionTtlSecs: 1, sagemakerModel: "accumulator" },
    );
    shortClient = sdkClient(short.server.sagemakerPort!);
  });
  after(async () => {
    shortClient?.destroy();
    await short?.stop();
  });

  it("an expired session ends by itself (reason 'expired', state freed) and its id gets a 400 saying it expired", async () => {
    const opened = await invoke(shortClient, { body: value(7), sessionId: "NEW_SESSION" });
    const { id, expiresAtMs } = newSession(opened);
    await waitFor("the session to expire", async () => {
      const listing = await listSequences(short.url, "accumulator");
      return listing.summary.ended.expired === 1 ? listing : undefined;
    });
    const listing = await listSequences(short.url, "accumulator");
    assert.deepEqual(listing.sequences, []);
    assert.equal(listing.summary.state_bytes, 0);
    const error = await sdkError(invoke(shortClient, { body: value(1), sessionId: id }));
    assert.equal(error.originalStatus, 400);
    const at = new Date(expiresAtMs).toISOString().slice(0, 19);
    assert.match(
      containerMessage(error),
      new RegExp(
        `^session '${id}' expired at ${at}Z \\(sessions last 1 s from opening\\): open a new session with NEW_SESSION$`,
      ),
    );
  });

  it("a session that expires waiting for a slot is told so in the sessions' words, as any later request is", async () => {
    // A KServe sequence holds the model's only slot: the session's first step waits.
    const holder = await infer(short.url, "held", int32Input(1), { id: 77, start: true });
    assert.equal(holder.status, 200);
    const error = await sdkError(
      invoke(shortClient, { body: value(2), sessionId: "NEW_SESSION", targetModel: "held" }),
    );
    assert.equal(error.originalStatus, 400);
    assert.match(
      containerMessage(error),
      /^session '[0-9a-f-]{36}' expired at [0-9T:-]+Z \(sessions last 1 s from opening\): open a new session with NEW_SESSION$/,
    );
    assert.equal((await infer(short.url, "held", int32Input(1), { id: 77, end: true })).status, 200);
  });
});
