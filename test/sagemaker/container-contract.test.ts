import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { gzipSync } from "node:zlib";
import { InvokeEndpointCommand, type SageMakerRuntimeClient } from "@aws-sdk/client-sagemaker-runtime";
import { accumulatorModel } from "../../tools/onnx/sequence-models.ts";
import { identityModel } from "../../tools/onnx/test-models.ts";
import { type HandlerRepository, handlerRepository } from "../handlers/support/handler-kit.ts";
import { send } from "../http/support/http-server.ts";
import { infer, outputData } from "../support/http-client.ts";
import { accumulatorConfig, int32Input, listSequences } from "../support/sequence-kit.ts";
import { startTestServer, type TestServer } from "../support/test-server.ts";
import {
  BINARY_JSON,
  containerMessage,
  invoke,
  jsonAnswer,
  NEW_SESSION_ID,
  newSession,
  sdkClient,
  sdkError,
} from "./support/sagemaker-kit.ts";

// The inference-container contract exactly as SageMaker uses it: GET /ping and POST
// /invocations with SageMaker's headers in and the session headers out; the runtime
// API's path for the SDKs; the 6 MB body limit; the body forms and what Accept does to
// the answer, and the answer when model code returns fewer outputs than declared; /ping
// while the server stops.

const SIX_MB = 6 * 1024 * 1024;

const BLOB_CONFIG = `
name: "blob"
backend: "onnxruntime"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_UINT8 dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_UINT8 dims: [ -1 ] } ]
`;

/** The headers SageMaker's front end sends the container with an invocation. */
function sageMakerHeaders(extra: Record<string, string> = {}): Record<string, string> {
  return {
    "Content-Type": "application/json",
    Accept: "application/json",
    "X-Amzn-SageMaker-Custom-Attributes": "trace_id=abc",
    "X-Amzn-SageMaker-Inference-Id": "inference-1",
    ...extra,
  };
}

let server: TestServer;
let port: number;
let client: SageMakerRuntimeClient;
before(async () => {
  server = await startTestServer(
    {
      accumulator: { config: accumulatorConfig("accumulator", 4, "direct { }"), onnx: accumulatorModel() },
      blob: { config: BLOB_CONFIG, onnx: identityModel("UINT8", [-1]) },
    },
    { sagemakerPort: 0, sagemakerModel: "accumulator" },
  );
  port = server.server.sagemakerPort!;
  client = sdkClient(port);
});
after(async () => {
  client?.destroy();
  await server?.stop();
});

describe("the container contract, as SageMaker calls it", { timeout: 60_000 }, () => {
  it("GET /ping answers 200 with an empty body when the models are ready", async () => {
    const ping = await send({ port }, "GET", "/ping", undefined, { "User-Agent": "AHC/2.0", Accept: "*/*" });
    assert.equal(ping.status, 200);
    assert.equal(ping.body.byteLength, 0);
  });

  it("POST /invocations: a session opened, used and closed with SageMaker's headers in and out", async () => {
    const opened = await send(
      { port },
      "POST",
      "/invocations",
      JSON.stringify({ requestType: "NEW_SESSION" }),
      sageMakerHeaders({ "X-Amzn-SageMaker-Session-Id": "NEW_SESSION" }),
    );
    assert.equal(opened.status, 200, opened.body.toString());
    const value = opened.headers["x-amzn-sagemaker-new-session-id"] as string;
    assert.match(value, NEW_SESSION_ID);
    assert.equal(opened.headers["x-amzn-sagemaker-session-id"], value);
    assert.match(opened.headers["content-type"]!, /^application\/json/);
    const id = NEW_SESSION_ID.exec(value)![1]!;
    assert.deepEqual(JSON.parse(opened.body.toString()), {
      session_id: id,
      expires: NEW_SESSION_ID.exec(value)![2],
      model_name: "accumulator",
      model_version: "1",
    });

    const step = await send(
      { port },
      "POST",
      "/invocations",
      JSON.stringify({ inputs: [{ name: "INPUT", datatype: "INT32", shape: [1, 1], data: [9] }] }),
      sageMakerHeaders({ "X-Amzn-SageMaker-Session-Id": id }),
    );
    assert.equal(step.status, 200, step.body.toString());
    assert.deepEqual(JSON.parse(step.body.toString()).outputs[0].data, [9]);
    assert.equal(step.headers["x-amzn-sagemaker-new-session-id"], undefined);
    assert.equal(step.headers["x-amzn-sagemaker-closed-session-id"], undefined);

    const closed = await send(
      { port },
      "POST",
      "/invocations",
      JSON.stringify({ requestType: "CLOSE" }),
      sageMakerHeaders({ "X-Amzn-SageMaker-Session-Id": id }),
    );
    assert.equal(closed.status, 200);
    assert.equal(closed.headers["x-amzn-sagemaker-closed-session-id"], id);
  });

  it("a START on a session's id over KServe restarts it as a session: it keeps its expiry, and the idle timeout still does not apply", async () => {
    const opened = await send(
      { port },
      "POST",
      "/invocations",
      JSON.stringify({ inputs: [{ name: "INPUT", datatype: "INT32", shape: [1, 1], data: [5] }] }),
      sageMakerHeaders({ "X-Amzn-SageMaker-Session-Id": "NEW_SESSION" }),
    );
    assert.equal(opened.status, 200, opened.body.toString());
    const [, id, expires] = NEW_SESSION_ID.exec(opened.headers["x-amzn-sagemaker-new-session-id"] as string)!;
    const restarted = await infer(server.url, "accumulator", int32Input(1), { id: id!, start: true });
    assert.deepEqual(outputData(restarted, "OUTPUT"), [1]);
    // Past the model's idle timeout (1 s, Triton's default), which would end a sequence.
    await new Promise((resolve) => setTimeout(resolve, 1500));
    const step = await send(
      { port },
      "POST",
      "/invocations",
      JSON.stringify({ inputs: [{ name: "INPUT", datatype: "INT32", shape: [1, 1], data: [2] }] }),
      sageMakerHeaders({ "X-Amzn-SageMaker-Session-Id": id! }),
    );
    assert.equal(step.status, 200, step.body.toString());
    assert.deepEqual(JSON.parse(step.body.toString()).outputs[0].data, [3]);
    const listed = (await listSequences(server.url, "accumulator")).sequences.find((s) => s.id === id);
    assert.equal(new Date(listed?.expiresAt as string).getTime(), new Date(expires!).getTime());
    const closed = await send(
      { port },
      "POST",
      "/invocations",
      JSON.stringify({ requestType: "CLOSE" }),
      sageMakerHeaders({ "X-Amzn-SageMaker-Session-Id": id! }),
    );
    assert.equal(closed.headers["x-amzn-sagemaker-closed-session-id"], id);
  });

  it("the body alone opens a session too, and the runtime API's path serves the same (any endpoint name, any signature)", async () => {
    const opened = await send(
      { port },
      "POST",
      "/endpoints/my-endpoint/invocations",
      JSON.stringify({ requestType: "NEW_SESSION" }),
      {
        "Content-Type": "application/json",
        Authorization:
          "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20260101/us-east-1/sagemaker/aws4_request, SignedHeaders=host, Signature=0",
      },
    );
    assert.equal(opened.status, 200);
    const id = NEW_SESSION_ID.exec(opened.headers["x-amzn-sagemaker-new-session-id"] as string)![1]!;
    const closed = await send(
      { port },
      "POST",
      "/endpoints/other/invocations",
      JSON.stringify({ requestType: "CLOSE" }),
      { "Content-Type": "application/json", "X-Amzn-SageMaker-Session-Id": id },
    );
    assert.equal(closed.headers["x-amzn-sagemaker-closed-session-id"], id);
  });

  it("errors are {error, message} with the AWS error type in x-amzn-errortype", async () => {
    const unknown = await send(
      { port },
      "POST",
      "/invocations",
      "[1]",
      sageMakerHeaders({ "X-Amzn-SageMaker-Session-Id": "abc" }),
    );
    assert.equal(unknown.status, 400);
    assert.equal(unknown.headers["x-amzn-errortype"], "ValidationError");
    const body = JSON.parse(unknown.body.toString()) as { error: string; message: string };
    assert.match(body.error, /^unknown session id 'abc'/);
    assert.equal(body.message, body.error);
    const route = await send({ port }, "GET", "/invocations");
    assert.equal(route.status, 405);
    assert.equal(route.headers.allow, "POST");
    const unknownRoute = await send({ port }, "GET", "/elsewhere");
    assert.equal(unknownRoute.status, 404);
  });

  it("on the runtime API's path, a container's error is the ModelError SageMaker makes of it; SageMaker's own refusals keep their type", async () => {
    const headers = sageMakerHeaders({ "X-Amzn-SageMaker-Session-Id": "abc" });
    const container = await send({ port }, "POST", "/invocations", "[1]", headers);
    const runtime = await send({ port }, "POST", "/endpoints/any/invocations", "[1]", headers);
    assert.equal(runtime.status, 424);
    assert.equal(runtime.headers["x-amzn-errortype"], "ModelError");
    const original = container.body.toString();
    assert.deepEqual(JSON.parse(runtime.body.toString()), {
      ErrorCode: "CLIENT_ERROR_FROM_MODEL",
      Message: `Received client error (400) from primary with message "${original}".`,
      OriginalMessage: original,
      OriginalStatusCode: 400,
    });
    // A SessionId of the wrong form is refused by SageMaker before any container sees it.
    const malformed = await send(
      { port },
      "POST",
      "/endpoints/any/invocations",
      "[1]",
      sageMakerHeaders({ "X-Amzn-SageMaker-Session-Id": "not_an_id" }),
    );
    assert.equal(malformed.status, 400);
    assert.equal(malformed.headers["x-amzn-errortype"], "ValidationError");
    assert.match(JSON.parse(malformed.body.toString()).message, /^malformed session id "not_an_id"/);
    // Whatever the body: SageMaker reads only the headers.
    const withBadBody = await send(
      { port },
      "POST",
      "/endpoints/any/invocations",
      "{not json",
      sageMakerHeaders({ "X-Amzn-SageMaker-Session-Id": "not_an_id" }),
    );
    assert.deepEqual([withBadBody.status, withBadBody.headers["x-amzn-errortype"]], [400, "ValidationError"]);
    assert.match(JSON.parse(withBadBody.body.toString()).message, /^malformed session id "not_an_id"/);
  });
});

describe("the 6 MB limit", { timeout: 60_000 }, () => {
  it("a body of exactly 6 MB is served; one byte more is refused with 413", async () => {
    const body = new Uint8Array(SIX_MB);
    for (let i = 0; i < body.length; i++) body[i] = i % 251;
    const echoed = await invoke(client, {
      body,
      contentType: "application/octet-stream",
      targetModel: "blob",
    });
    assert.equal(echoed.ContentType, "application/octet-stream");
    assert.ok(Buffer.from(echoed.Body!).equals(Buffer.from(body)));

    const tooLarge = await sdkError(
      invoke(client, {
        body: new Uint8Array(SIX_MB + 1),
        contentType: "application/octet-stream",
        targetModel: "blob",
      }),
    );
    // SageMaker's own limit on the bytes it receives: its refusal, not the container's.
    assert.deepEqual([tooLarge.name, tooLarge.status], ["ValidationError", 413]);
    assert.match(tooLarge.message, /request body is larger than the limit of 6291456 bytes/);
  });

  it("a small gzip body that inflates past 6 MB is the container's 413, inside a ModelError", async () => {
    const inflating = await send(
      { port },
      "POST",
      "/endpoints/any/invocations",
      gzipSync(new Uint8Array(SIX_MB + 1)),
      sageMakerHeaders({
        "Content-Type": "application/octet-stream",
        "Content-Encoding": "gzip",
        "X-Amzn-SageMaker-Target-Model": "blob",
      }),
    );
    assert.equal(inflating.status, 424);
    const error = JSON.parse(inflating.body.toString()) as {
      OriginalStatusCode: number;
      OriginalMessage: string;
    };
    assert.equal(error.OriginalStatusCode, 413);
    assert.match(error.OriginalMessage, /request body inflates to more than the limit of 6291456 bytes/);
  });
});

describe("body forms and Accept", { timeout: 60_000 }, () => {
  it("raw bytes in, raw bytes out; Accept chooses JSON or the binary form; an Accept nothing fits is refused before the step runs", async () => {
    const opened = await invoke(client, {
      body: JSON.stringify({ requestType: "NEW_SESSION" }),
      sessionId: "NEW_SESSION",
    });
    const id = NEW_SESSION_ID.exec(opened.NewSessionId!)![1]!;
    const int32 = (n: number) => new Uint8Array(Int32Array.of(n).buffer);

    const raw = await invoke(client, {
      body: int32(5),
      contentType: "application/octet-stream",
      sessionId: id,
    });
    assert.equal(raw.ContentType, "application/octet-stream");
    assert.equal(Buffer.from(raw.Body!).readInt32LE(0), 5);

    const asJson = await invoke(client, {
      body: int32(2),
      contentType: "application/octet-stream",
      accept: "application/json",
      sessionId: id,
    });
    assert.deepEqual(jsonAnswer(asJson), [[7]]);
    // Exactly Triton's type (no charset), which the SDK hands over as ContentType.
    assert.equal(asJson.ContentType, "application/json");

    const refused = await sdkError(
      invoke(client, {
        body: int32(100),
        contentType: "application/octet-stream",
        accept: "text/csv",
        sessionId: id,
      }),
    );
    assert.equal(refused.originalStatus, 406);
    assert.match(containerMessage(refused), /no answer fits Accept 'text\/csv'/);

    const header = Buffer.from(
      JSON.stringify({
        inputs: [{ name: "INPUT", datatype: "INT32", shape: [1, 1], parameters: { binary_data_size: 4 } }],
      }),
    );
    const binary = await invoke(client, {
      body: Buffer.concat([header, int32(1)]),
      contentType: `${BINARY_JSON};json-header-size=${header.byteLength}`,
      accept: "application/json",
      sessionId: id,
    });
    // The refused step did not run: 5 + 2 + 1.
    assert.deepEqual((jsonAnswer(binary) as { outputs: { data: number[] }[] }).outputs[0]!.data, [8]);

    const bare = await invoke(client, {
      body: "[[4]]",
      sessionId: id,
      accept: `${BINARY_JSON}, application/json;q=0.5`,
    });
    assert.match(
      bare.ContentType!,
      /^application\/vnd\.sagemaker-triton\.binary\+json;json-header-size=\d+$/,
    );

    const mislabelled = await sdkError(
      invoke(client, {
        body: JSON.stringify({ inputs: [{ name: "INPUT", datatype: "INT32", shape: [1, 1], data: [1] }] }),
        contentType: "text/plain",
        sessionId: id,
      }),
    );
    assert.match(
      containerMessage(mislabelled),
      /it looks like JSON: send it with Content-Type: application\/json/,
    );
    // CSV is text, not the input's bytes: "1000" would be the int32 808464433.
    const csv = await sdkError(invoke(client, { body: "1000", contentType: "text/csv", sessionId: id }));
    assert.equal(csv.originalStatus, 400);
    assert.match(
      containerMessage(csv),
      /^a text\/csv body cannot feed input 'INPUT' \(INT32\) of model 'accumulator': its text is not the input's bytes/,
    );
    const listed = (await listSequences(server.url, "accumulator")).sequences.find((s) => s.id === id);
    assert.equal(listed?.steps, 4);
  });

  it("JSON sent without a ContentType (the SDK then says application/octet-stream) is read as JSON, as Triton reads it: a step, and a CLOSE that closes", async () => {
    const { id } = newSession(
      await invoke(client, {
        body: JSON.stringify({ requestType: "NEW_SESSION" }),
        sessionId: "NEW_SESSION",
      }),
    );
    // The SDK unmodified, as a caller writes it: no ContentType.
    const untyped = (body: string) =>
      client.send(
        new InvokeEndpointCommand({ EndpointName: "seqserve", SessionId: id, Body: Buffer.from(body) }),
      );
    const step = await untyped(
      JSON.stringify({ inputs: [{ name: "INPUT", datatype: "INT32", shape: [1, 1], data: [5] }] }),
    );
    assert.deepEqual((jsonAnswer(step) as { outputs: { data: number[] }[] }).outputs[0]!.data, [5]);
    const bare = await untyped(" [[2]]\n");
    assert.deepEqual(jsonAnswer(bare), [[7]]);
    const closed = await untyped('{"requestType": "CLOSE"}');
    assert.equal(closed.ClosedSessionId, id);
    const after = await sdkError(untyped("[[1]]"));
    assert.equal(after.originalStatus, 400);
    assert.match(containerMessage(after), new RegExp(`^session '${id}' is closed`));
  });

  it("raw bytes that begin and end as JSON does but are not JSON stay the input's bytes, small or large", async () => {
    const echo = (body: Uint8Array, contentType?: string) =>
      client.send(
        new InvokeEndpointCommand({
          EndpointName: "seqserve",
          TargetModel: "blob",
          Body: body,
          Accept: "application/octet-stream",
          ...(contentType === undefined ? {} : { ContentType: contentType }),
        }),
      );
    const small = Uint8Array.of(0x7b, 0, 1, 2, 0x7d);
    assert.deepEqual([...(await echo(small)).Body!], [...small]);
    assert.deepEqual([...(await echo(small, "application/octet-stream")).Body!], [...small]);
    // Large enough to be parsed on the JSON thread: its bytes come back from there intact.
    const large = new Uint8Array(2 * 1024 * 1024).map((_, i) => i % 251);
    large[0] = 0x5b;
    large[large.length - 1] = 0x5d;
    const echoed = await echo(large, "application/octet-stream");
    assert.ok(Buffer.from(echoed.Body!).equals(large));
    // Bytes the model's input cannot take either are refused saying why they were not JSON.
    const refused = await sdkError(
      invoke(client, { body: "{not json}", contentType: "application/octet-stream" }),
    );
    assert.equal(refused.originalStatus, 400);
    assert.match(
      containerMessage(refused),
      /\(the body was read as raw input bytes: it looks like JSON, but is not \(failed to parse the request JSON buffer: /,
    );
  });

  it("Accept's weight is read whatever its case: Q=0 rules a type out as q=0 does", async () => {
    const echo = (accept: string) =>
      invoke(client, {
        body: Uint8Array.of(1, 2),
        contentType: "application/octet-stream",
        accept,
        targetModel: "blob",
      });
    for (const accept of ["application/json;q=0", "application/json;Q=0", "application/json; Q=0"]) {
      const refused = await sdkError(echo(accept));
      assert.equal(refused.originalStatus, 406, accept);
      assert.match(containerMessage(refused), /^no answer fits Accept/, accept);
    }
    const raw = await echo("application/json;Q=0, application/octet-stream;q=0.5");
    assert.equal(raw.ContentType, "application/octet-stream");
    assert.deepEqual([...raw.Body!], [1, 2]);
    const json = await echo("application/octet-stream;Q=0.1, application/json;Q=0.9");
    assert.deepEqual(jsonAnswer(json), [1, 2]);
  });
});

// Model code that answers a step with fewer outputs than its config declares, as
// examples/models/session_context answers no ANSWER without a QUERY: 0 adds nothing and
// answers nothing; -n answers the running sum n times.
const TALLY_CONFIG = `
backend: "typescript"
max_batch_size: 0
input [ { name: "VALUE" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "SUM" data_type: TYPE_INT32 dims: [ -1 ] } ]
sequence_batching { oldest { max_candidate_sequences: 4 } }
`;
const TALLY = `
export default {
  execute(requests: any[]) {
    return requests.map((request) => {
      const value = Number(request.inputs.VALUE.data[0]);
      const state = request.sequence.state;
      const sum = (state.get("sum") ?? 0) + value;
      state.set("sum", sum);
      if (value === 0) return { outputs: {} };
      const count = value < 0 ? -value : 1;
      return { outputs: { SUM: { datatype: "INT32", shape: [count], data: new Int32Array(count).fill(sum) } } };
    });
  },
};
`;

describe("answers when model code returns fewer outputs than declared", { timeout: 60_000 }, () => {
  let repository: HandlerRepository;
  let tally: TestServer;
  let tallyPort: number;
  let tallyClient: SageMakerRuntimeClient;
  before(async () => {
    repository = handlerRepository({ tally: { config: TALLY_CONFIG, files: { "1/model.ts": TALLY } } });
    tally = await startTestServer(repository.path, { sagemakerPort: 0 });
    tallyPort = tally.server.sagemakerPort!;
    tallyClient = sdkClient(tallyPort);
  });
  after(async () => {
    tallyClient?.destroy();
    await tally?.stop();
    repository?.remove();
  });

  const value = (n: number, extra: Record<string, unknown> = {}): string =>
    JSON.stringify({ ...extra, inputs: [{ name: "VALUE", datatype: "INT32", shape: [1], data: [n] }] });
  const int32 = (n: number) => new Uint8Array(Int32Array.of(n).buffer);
  const noOutputs = { model_name: "tally", model_version: "1", outputs: [] };
  /** More values than classification ranks (1,000,000): an answer that fails after its step ran. */
  const unsendable = value(-1_000_001, { outputs: [{ name: "SUM", parameters: { classification: 1 } }] });

  it("a bare answer meant for one output comes back in the KServe JSON form when none does: opening, continuing and closing, each step applied once", async () => {
    const opened = await invoke(tallyClient, {
      body: value(0),
      accept: "application/octet-stream",
      sessionId: "NEW_SESSION",
    });
    assert.match(opened.ContentType!, /^application\/json/);
    assert.deepEqual(jsonAnswer(opened), noOutputs);
    const { id } = newSession(opened);

    const raw = await invoke(tallyClient, {
      body: int32(0),
      contentType: "application/octet-stream",
      sessionId: id,
    });
    assert.match(raw.ContentType!, /^application\/json/);
    assert.deepEqual(jsonAnswer(raw), noOutputs);
    const array = await invoke(tallyClient, { body: "[0]", sessionId: id });
    assert.deepEqual(jsonAnswer(array), noOutputs);
    // One output back: the bare forms as before, from a state each step moved on once.
    const five = await invoke(tallyClient, {
      body: int32(5),
      contentType: "application/octet-stream",
      sessionId: id,
    });
    assert.equal(five.ContentType, "application/octet-stream");
    assert.equal(Buffer.from(five.Body!).readInt32LE(0), 5);
    const listed = (await listSequences(tally.url, "tally")).sequences.find((s) => s.id === id);
    assert.equal(listed?.steps, 4);

    const closed = await invoke(tallyClient, {
      body: value(0, { requestType: "CLOSE" }),
      accept: "application/octet-stream",
      sessionId: id,
    });
    assert.equal(closed.ClosedSessionId, id);
    assert.deepEqual(jsonAnswer(closed), noOutputs);
  });

  it("an opening whose inputs the model refuses opens nothing, and counts no session ended", async () => {
    const before = await listSequences(server.url, "accumulator");
    const refused = await send(
      { port },
      "POST",
      "/invocations",
      JSON.stringify({ inputs: [{ name: "INPUT", datatype: "INT32", shape: [1, 2], data: [1, 2] }] }),
      { "Content-Type": "application/json", "X-Amzn-SageMaker-Session-Id": "NEW_SESSION" },
    );
    assert.equal(refused.status, 400, refused.body.toString());
    assert.equal(refused.headers["x-amzn-sagemaker-new-session-id"], undefined);
    const after = await listSequences(server.url, "accumulator");
    assert.deepEqual(
      after.sequences.map((s) => s.id),
      before.sequences.map((s) => s.id),
    );
    assert.deepEqual(after.summary.ended, before.summary.ended);
  });

  it("an opening whose answer fails after its step ran ends the session, and no failure carries a session header", async () => {
    const before = await listSequences(tally.url, "tally");
    const failedOpen = await send({ port: tallyPort }, "POST", "/invocations", unsendable, {
      "Content-Type": "application/json",
      "X-Amzn-SageMaker-Session-Id": "NEW_SESSION",
    });
    assert.equal(failedOpen.status, 400);
    assert.match(JSON.parse(failedOpen.body.toString()).message, /classification output tensor too large/);
    assert.equal(failedOpen.headers["x-amzn-sagemaker-new-session-id"], undefined);
    assert.equal(failedOpen.headers["x-amzn-sagemaker-session-id"], undefined);
    const afterOpen = await listSequences(tally.url, "tally");
    assert.deepEqual(
      afterOpen.sequences.map((s) => s.id),
      before.sequences.map((s) => s.id),
    );
    assert.equal(afterOpen.summary.ended.forced, (before.summary.ended.forced ?? 0) + 1);

    const { id } = newSession(await invoke(tallyClient, { body: value(1), sessionId: "NEW_SESSION" }));
    const failedClose = await send(
      { port: tallyPort },
      "POST",
      "/invocations",
      JSON.stringify({ ...JSON.parse(unsendable), requestType: "CLOSE" }),
      { "Content-Type": "application/json", "X-Amzn-SageMaker-Session-Id": id },
    );
    assert.equal(failedClose.status, 400);
    assert.equal(failedClose.headers["x-amzn-sagemaker-closed-session-id"], undefined);
  });
});

describe("GET /ping while the server stops", { timeout: 60_000 }, () => {
  it("answers 503 with the reason once the server is stopping, while live sessions may still finish", async () => {
    const stopping = await startTestServer(
      {
        accumulator: { config: accumulatorConfig("accumulator", 4, "direct { }"), onnx: accumulatorModel() },
      },
      { sagemakerPort: 0, exitTimeoutSecs: 30 },
    );
    const stoppingPort = stopping.server.sagemakerPort!;
    const stoppingClient = sdkClient(stoppingPort);
    try {
      const opened = await invoke(stoppingClient, { body: "[1]", sessionId: "NEW_SESSION" });
      const id = NEW_SESSION_ID.exec(opened.NewSessionId!)![1]!;
      const stopped = stopping.stop();
      const ping = await send({ port: stoppingPort }, "GET", "/ping");
      assert.equal(ping.status, 503);
      assert.equal(ping.headers["x-amzn-errortype"], "ServiceUnavailable");
      assert.equal(JSON.parse(ping.body.toString()).error, "Server exiting");
      // The live session still works and closes; then the server stops.
      assert.deepEqual(jsonAnswer(await invoke(stoppingClient, { body: "[2]", sessionId: id })), [[3]]);
      const refused = await sdkError(invoke(stoppingClient, { body: "[1]", sessionId: "NEW_SESSION" }));
      // A stopping server's refusal is SageMaker's own kind (the SDKs retry it), not a ModelError.
      assert.deepEqual([refused.name, refused.status], ["ServiceUnavailable", 503]);
      assert.match(
        refused.message,
        /^Server is stopping, scheduler for model has stopped accepting new inference requests/,
      );
      await invoke(stoppingClient, { body: JSON.stringify({ requestType: "CLOSE" }), sessionId: id });
      await stopped;
    } finally {
      stoppingClient.destroy();
      await stopping.stop();
    }
  });
});
