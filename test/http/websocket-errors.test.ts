import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { send, startServer, type TestServer } from "./support/http-server.ts";
import { type RunningSumModel, runningSumModel } from "./support/running-sum-model.ts";
import { framed, refusedUpgrade, StreamClient, until } from "./support/ws-client.ts";

// Errors on a stream: a bad message is answered in-band and the sequence goes on; a
// sequence that is gone closes the stream (4410); a stream that cannot be served is
// refused before the upgrade with the HTTP API's status and `{"error": …}` body.

function input(values: number[], extra: Record<string, unknown> = {}): Record<string, unknown> {
  return { ...extra, inputs: [{ name: "INPUT", datatype: "INT32", shape: [values.length], data: values }] };
}

async function sumAnswer(client: StreamClient): Promise<number> {
  const answer = await client.nextText();
  const data = (answer.outputs as { data: number[] }[] | undefined)?.[0]?.data;
  assert.ok(data !== undefined, `expected outputs, got ${JSON.stringify(answer)}`);
  return data[0]!;
}

describe("WebSocket streams: errors", { timeout: 30_000 }, () => {
  let server: TestServer;
  let model: RunningSumModel;
  before(async () => {
    server = await startServer();
    model = runningSumModel();
    server.fake.registry.add(model.model);
  });
  after(() => server.close());

  it("answers bad messages in-band and keeps the sequence going", async () => {
    const client = await StreamClient.open(server, "/v2/models/running_sum/stream");
    // A failed first message starts nothing: the next one starts the sequence.
    client.send("{not json");
    const parse = await client.nextText();
    assert.equal(
      parse.error,
      "failed to parse the request JSON buffer: Missing a name for object member. at 1",
    );
    assert.equal(parse.id, undefined);
    client.send(input([1], { id: "start" }));
    const start = await client.nextText();
    assert.equal(typeof start.parameters, "object");
    assert.deepEqual((start.outputs as { data: number[] }[])[0]?.data, [1]);

    const failures: [unknown, string | Buffer, RegExp][] = [
      [
        "size",
        framed(
          {
            id: "size",
            inputs: [{ name: "INPUT", datatype: "INT32", shape: [2], parameters: { binary_data_size: 8 } }],
          },
          [new Int32Array([1])],
        ),
        /unexpected size for input 'INPUT'/,
      ],
      [
        "type",
        JSON.stringify({ id: "type", inputs: [{ name: "INPUT", datatype: "FP32", shape: [1], data: [1] }] }),
        /expects input 'INPUT' of INT32/,
      ],
      [
        "owned",
        JSON.stringify(input([1], { id: "owned", parameters: { sequence_id: 5 } })),
        /may not set 'sequence_id' or 'sequence_start'/,
      ],
      [
        "start",
        JSON.stringify(input([1], { id: "start", parameters: { sequence_start: true } })),
        /may not set 'sequence_id' or 'sequence_start'/,
      ],
      [
        "model",
        JSON.stringify(input([1], { id: "model", parameters: { fail: true } })),
        /^the model failed on purpose$/,
      ],
      [undefined, Buffer.from([1, 0]), /starts with the 4-byte little-endian length/],
      [
        undefined,
        Buffer.from([200, 0, 0, 0, 0x7b]),
        /JSON header length is 200 bytes, but only 1 bytes follow/,
      ],
    ];
    for (const [id, message, pattern] of failures) {
      client.send(message);
      const error = await client.nextText();
      assert.match(String(error.error), pattern);
      assert.equal(error.id, id);
      assert.deepEqual(Object.keys(error).sort(), id === undefined ? ["error"] : ["error", "id"]);
    }
    client.send(input([41]));
    assert.equal(await sumAnswer(client), 42, "the state is what the good messages made it");
    await client.close();
  });

  it("closes with 4410 when the sequence is gone", async () => {
    const client = await StreamClient.open(server, "/v2/models/running_sum/stream?sequence_id=doomed");
    client.send(input([1]));
    assert.equal(await sumAnswer(client), 1);
    // As DELETE /v2/models/running_sum/sequences/doomed (or an idle timeout) would.
    assert.equal(model.sums.end("doomed"), true);
    client.send(input([2], { id: "late" }));
    const error = await client.nextText();
    assert.equal(error.id, "late");
    // Not the core's call for a START flag, which a stream's messages may not carry.
    assert.equal(
      error.error,
      "sequence doomed of model 'running_sum' no longer exists (ended by its idle timeout, a DELETE, or an END sent elsewhere): open a new stream to start it again",
    );
    const closed = await client.closed;
    assert.equal(closed.code, 4410);
    assert.match(closed.reason, /^sequence doomed of model 'running_sum' no longer exists/);
    assert.deepEqual(
      model.sums.ends.filter((e) => e.id === "doomed"),
      [{ id: "doomed", reason: "forced" }],
    );
    // A gone sequence is not ended again: its id may already belong to a new sequence.
    await until(() => server.app.websocketServer.clients.size === 0, "the server to close the stream");
    assert.deepEqual(
      model.sums.endCalls.filter((e) => e.id === "doomed"),
      [{ id: "doomed", reason: "forced" }],
    );
  });

  it("refuses an upgrade it cannot serve, with the HTTP error", async () => {
    const cases: [string, number, RegExp][] = [
      ["/v2/models/missing/stream", 404, /^Request for unknown model: 'missing' is not found$/],
      ["/v2/models/running_sum/versions/9/stream", 404, /'running_sum' version 9 is not found/],
      ["/v2/models/running_sum/versions/x/stream", 400, /version should be an integral value/],
      ["/v2/models/running_sum/stream?format=json", 400, /unknown stream format 'json'/],
      [
        "/v2/models/running_sum/stream?binary_data_output=yes",
        400,
        /'binary_data_output': expected 'true' or 'false'/,
      ],
      ["/v2/models/running_sum/stream?sequence_id=", 400, /'sequence_id' is empty/],
      ["/v2/models/running_sum/stream?sequence_id=0", 400, /sequence id 0 means no id/],
      ["/v2/models/running_sum/stream?sequence_id=18446744073709551616", 400, /is not a uint64/],
      [
        "/v2/models/running_sum/stream?sequence_id=1&sequence_id=2",
        400,
        /'sequence_id' is given more than once/,
      ],
      ["/v2/models/running_sum/stream?sequenceid=1", 400, /unknown query parameter 'sequenceid'/],
      ["/v2/models/echo/stream?sequence_id=1", 400, /model 'echo' is not served with sequence batching/],
      ["/v2/models/raw_two/stream?format=raw", 400, /model 'raw_two' has 2 inputs/],
    ];
    for (const [path, status, pattern] of cases) {
      const refused = await refusedUpgrade(server, path);
      assert.equal(refused.status, status, path);
      assert.match(String(refused.json.error), pattern, path);
    }
  });

  it("answers a plain GET of a stream with 426", async () => {
    const response = await send(server, "GET", "/v2/models/running_sum/stream");
    assert.equal(response.status, 426);
    assert.equal(response.headers.upgrade, "websocket");
    assert.match(JSON.parse(response.body.toString()).error, /is a WebSocket/);
  });
});
