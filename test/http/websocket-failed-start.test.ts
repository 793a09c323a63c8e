import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { type ApiKey, OPEN_ACCESS, securityOptions } from "../../src/config/security-options.ts";
import { accumulatorModel } from "../../tools/onnx/sequence-models.ts";
import { accumulatorConfig, waitFor } from "../support/sequence-kit.ts";
import { startTestServer, type TestServer } from "../support/test-server.ts";
import { StreamClient } from "./support/ws-client.ts";

// A stream's start that fails, on the real core: one the core refuses before taking it
// (an invalid request, another caller's id) starts nothing, so it neither takes the id
// from the stream that owns it nor ends that stream's sequence.

const KEYS: ApiKey[] = [
  { name: "tenant-a", secret: "a-secret-key-0123456789", groups: ["inference", "sequences"] },
  { name: "tenant-b", secret: "b-secret-key-0123456789", groups: ["inference"] },
];
const [A, B] = KEYS.map((k) => ({ authorization: `Bearer ${k.secret}` })) as [
  Record<string, string>,
  Record<string, string>,
];

const ACC = accumulatorConfig("acc", 8, "max_sequence_idle_microseconds: 600000000\n  direct { }");

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
      { acc: { config: ACC, onnx: accumulatorModel() } },
      { security: securityOptions({ access: { ...OPEN_ACCESS, apiKeys: KEYS } }) },
    );
  });
  after(() => server.stop());

  const open = (id: number, headers: Record<string, string>) =>
    StreamClient.open({ port: server.server.httpPort }, `/v2/models/acc/stream?sequence_id=${id}`, headers);

  /** The live sequences of `model`, by id. */
  const live = async (model: string) => {
    const listing = await fetch(`${server.url}/v2/models/${model}/sequences`, { headers: A });
    const body = (await listing.json()) as { sequences: { id: number | string }[] };
    return body.sequences.map((s) => s.id);
  };

  it("an invalid start on another stream's id leaves that stream and its sequence alone", async () => {
    const owner = await open(61, A);
    owner.send(int32(5));
    assert.equal(await output(owner), 5);
    const other = await open(61, A);
    other.send({ id: "fp32", inputs: [{ name: "INPUT", datatype: "FP32", shape: [1, 1], data: [1] }] });
    assert.deepEqual(await other.nextText(), {
      error: "inference input 'INPUT' data-type is 'FP32', but model 'acc' expects 'INT32'",
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
});
