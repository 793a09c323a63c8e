import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { accumulatorModel } from "../../tools/onnx/sequence-models.ts";
import { identityModel } from "../../tools/onnx/test-models.ts";
import { postJson } from "../support/http-client.ts";
import { accumulatorConfig } from "../support/sequence-kit.ts";
import { startTestServer, type TestServer } from "../support/test-server.ts";
import { StreamClient } from "./support/ws-client.ts";

// A stream whose model is unloaded while it is open: its next message is told the model
// is no longer served, in the words a plain request gets, and the stream closes (1001 for
// independent requests, 4410 for a sequence, which ended with the unload).

let server: TestServer;
before(async () => {
  server = await startTestServer(
    {
      floats: { onnx: identityModel("FP32", [-1, 4]) },
      acc: {
        config: accumulatorConfig("acc", 8, "max_sequence_idle_microseconds: 600000000"),
        onnx: accumulatorModel(),
      },
    },
    { modelControlMode: "explicit", loadModels: ["*"] },
  );
});
after(() => server.stop());

const port = () => ({ port: Number(new URL(server.url).port) });

test("a stream of independent requests: told the model is no longer served, then closed 1001", async () => {
  const stream = await StreamClient.open(port(), "/v2/models/floats/stream");
  const message = { inputs: [{ name: "INPUT0", datatype: "FP32", shape: [1, 4], data: [1, 2, 3, 4] }] };
  stream.send(message);
  assert.ok((await stream.nextText()).outputs !== undefined);
  assert.equal((await postJson(`${server.url}/v2/repository/models/floats/unload`, {})).status, 200);
  stream.send(message);
  assert.deepEqual(await stream.nextText(), {
    error:
      "Request for unknown model: 'floats' has no available versions: the model is no longer served (unloaded); open a new stream once it is loaded again",
  });
  assert.equal((await stream.closed).code, 1001);
});

test("a sequence's stream: told the model is no longer served, then closed 4410", async () => {
  const stream = await StreamClient.open(port(), "/v2/models/acc/stream");
  const message = { inputs: [{ name: "INPUT", datatype: "INT32", shape: [1, 1], data: [2] }] };
  stream.send(message);
  assert.ok((await stream.nextText()).outputs !== undefined);
  assert.equal((await postJson(`${server.url}/v2/repository/models/acc/unload`, {})).status, 200);
  stream.send(message);
  const refused = await stream.nextText();
  assert.match(
    String(refused.error),
    /: the model is no longer served \(unloaded\); open a new stream once it is loaded again$/,
  );
  assert.equal((await stream.closed).code, 4410);
});
