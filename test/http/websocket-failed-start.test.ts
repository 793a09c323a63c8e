import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { type ApiKey, OPEN_ACCESS, securityOptions } from "../../src/config/security-options.ts";
import { accumulatorModel, growingStateConfig, growingStateModel } from "../../tools/onnx/sequence-models.ts";
import { accumulatorConfig, waitFor } from "../support/sequence-kit.ts";
import { startTestServer, type TestServer } from "../support/test-server.ts";
import { refusedUpgrade, StreamClient } from "./support/ws-client.ts";

// A stream's start that fails, on the real core: one the core refuses before taking it
// (an invalid request, another caller's id) starts nothing, so it neither takes the id
// from the stream that owns it nor ends that stream's sequence; one that fails once taken
// (in the model) leaves no sequence either: the core ends the sequence it began, as it
// does for a server-assigned id.

const KEYS: ApiKey[] = [
  { name: "tenant-a", secret: "a-secret-key-0123456789", groups: ["inference", "sequences"] },
  { name: "tenant-b", secret: "b-secret-key-0123456789", groups: ["inference"] },
];
const bearer = (key: ApiKey) => ({ authorization: `Bearer ${key.secret}` });
const A = bearer(KEYS[0]!);
const B = bearer(KEYS[1]!);

const ACC = accumulatorConfig("acc", 8, "max_sequence_idle_microseconds: 600000000\n  direct { }");
// Every start fails: the state starts as one FP32 column and the start adds another.
const GROWING = growingStateConfig(
  "max_sequence_idle_microseconds: 600000000",
  'parameters [ { key: "sequence_state_max_bytes" value: { string_value: "4" } } ]',
);

const int32 = (value: number, id?: string) => ({
  ...(id === undefined ? {} : { id }),
  inputs: [{ name: "INPUT", datatype: "INT32", shape: [1, 1], data: [value] }],
});

async function output(client: StreamClient): Promise<number> {
  const answer = await client.nextText();
  const data = (answer.outputs as { data: number[] }[] | undefined)?.[0]?.data;
  assert.ok(data !== undefined, `expected outputs, got ${JSON.stringify(answer)}`);
  return data[0]!;
}

describe("WebSocket streams: a start that fails", { timeout: 60_000 }, () => {
  let server: TestServer;
  before(async () => {
    server = await startTestServer(
      {
        acc: { config: ACC, onnx: accumulatorModel() },
        growing: { config: GROWING, onnx: growingStateModel() },
      },
      { security: securityOptions({ access: { ...OPEN_ACCESS, apiKeys: KEYS } }) },
    );
  });
  after(() => server.stop());

  const open = (id: number, headers: Record<string, string>, model = "acc") =>
    StreamClient.open(
      { port: Number(new URL(server.url).port) },
      `/v2/models/${model}/stream${id === 0 ? "" : `?sequence_id=${id}`}`,
      headers,
    );

  /** The sequences API's listing of `model`: the live ids and the ends by reason. */
  const sequences = async (model: string) => {
    const listing = await fetch(`${server.url}/v2/models/${model}/sequences`, { headers: A });
    const body = (await listing.json()) as {
      sequences: { id: number | string }[];
      summary: { ended: Record<string, number> };
    };
    return { live: body.sequences.map((s) => s.id), ended: body.summary.ended };
  };
  const live = async (model: string) => (await sequences(model)).live;

  it("an id the model cannot take is refused before the upgrade, with the HTTP error", async () => {
    const port = Number(new URL(server.url).port);
    const long = "x".repeat(257);
    const refused = await refusedUpgrade({ port }, `/v2/models/acc/stream?sequence_id=${long}`, A);
    assert.equal(refused.status, 400);
    assert.equal(
      refused.json.error,
      "the sequence id of model 'acc' is 257 bytes long, more than the 256 bytes allowed (--max-sequence-id-bytes)",
    );
    assert.deepEqual(await live("acc"), []);
    // Named by X-Sequence-Id alone: refused before the upgrade too.
    const routed = await refusedUpgrade({ port }, "/v2/models/acc/stream", { ...A, "x-sequence-id": long });
    assert.deepEqual(
      [routed.status, routed.json.error],
      [
        400,
        "the sequence id of model 'acc' is 257 bytes long, more than the 256 bytes allowed (--max-sequence-id-bytes)",
      ],
    );
  });

  it("an invalid start on another stream's id leaves that stream and its sequence alone", async () => {
    const owner = await open(61, A);
    owner.send(int32(5));
    assert.equal(await output(owner), 5);
    const other = await open(61, A);
    other.send({ id: "fp32", inputs: [{ name: "INPUT", datatype: "FP32", shape: [1, 1], data: [1] }] });
    assert.deepEqual(await other.nextText(), {
      error:
        "[request id: fp32] inference input 'INPUT' data-type is 'FP32', but model 'acc' expects 'INT32'",
      id: "fp32",
    });
    owner.send(int32(1));
    assert.equal(await output(owner), 6, "the owner's sequence goes on from its state");
    // The stream whose start failed has no sequence: its close ends none.
    await other.close(1000);
    owner.send(int32(1));
    assert.equal(await output(owner), 7);
    await owner.close(1000);
    await waitFor("sequence 61 to end", async () => ((await live("acc")).includes(61) ? undefined : true));
  });

  it("a start with another caller's id is refused and leaves the owner's stream and sequence alone", async () => {
    const owner = await open(62, A);
    owner.send(int32(5));
    assert.equal(await output(owner), 5);
    const intruder = await open(62, B);
    intruder.send(int32(100, "steal"));
    assert.deepEqual(await intruder.nextText(), {
      error:
        "sequence 62 of model 'acc' belongs to another caller: only the API key that started it may continue or end it",
      id: "steal",
    });
    owner.send(int32(1));
    assert.equal(await output(owner), 6, "the owner's sequence goes on from its state");
    intruder.socket.terminate();
    await intruder.closed;
    owner.send(int32(1));
    assert.equal(await output(owner), 7);
    await owner.close(1000);
    await waitFor("sequence 62 to end", async () => ((await live("acc")).includes(62) ? undefined : true));
  });

  it("a start that fails in the model ends the sequence it began, as with a server-assigned id", async () => {
    const refused = (id: string) =>
      `the state of sequence ${id} of model 'growing' would hold 269 bytes, more than its sequence_state_max_bytes (4): the sequence is not started`;
    const float = { id: "f", inputs: [{ name: "INPUT", datatype: "FP32", shape: [1, 1], data: [1] }] };
    const stream = await open(5, A, "growing");
    stream.send(float);
    assert.deepEqual(await stream.nextText(), { error: refused("5"), id: "f" });
    assert.deepEqual(await live("growing"), [], "the failed start left no sequence");
    // The next message starts again (a continuation would be refused for want of a START).
    stream.send(float);
    assert.deepEqual(await stream.nextText(), { error: refused("5"), id: "f" });
    assert.deepEqual(await live("growing"), []);

    const assigned = await open(0, A, "growing");
    assigned.send(float);
    assert.match(
      String((await assigned.nextText()).error),
      /^the state of sequence \d+ .* would hold 269 bytes/,
    );
    assert.deepEqual(await live("growing"), []);
    await waitFor("the three failed starts' sequences to be ended", async () =>
      (await sequences("growing")).ended.forced === 3 ? true : undefined,
    );
    await assigned.close(1000);
    await stream.close(1000);
    assert.deepEqual(await live("growing"), []);
  });
});
