import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import type { SageMakerRuntimeClient } from "@aws-sdk/client-sagemaker-runtime";
import { OFF_THREAD_JSON_BYTES } from "../../src/frontends/json-thread/json-thread.ts";
import { identityModel } from "../../tools/onnx/test-models.ts";
import {
  containerMessage,
  invoke,
  type SdkError,
  sdkClient,
  sdkError,
} from "../sagemaker/support/sagemaker-kit.ts";
import { startTestServer, type TestServer } from "../support/test-server.ts";
import { framed, StreamClient } from "./support/ws-client.ts";

// BYTES sent in a JSON body must be UTF-8, as JSON text is: bytes that are not, raw in the
// body, or a lone surrogate escaped ("\ud800"), reached the model as U+FFFD (ef bf bd),
// silently other bytes than the client's. They are refused, saying where, on every form
// that reads JSON: KServe over HTTP (small bodies and those parsed on the JSON thread) and
// WebSocket, the TF-Serving REST API, SageMaker, and the repository's control bodies.

let server: TestServer;
let sagemaker: SageMakerRuntimeClient;
before(async () => {
  server = await startTestServer(
    { bytes: { config: "max_batch_size: 0", onnx: identityModel("BYTES", [-1]) } },
    { sagemakerPort: 0 },
  );
  sagemaker = sdkClient(server.server.sagemakerPort!);
});
after(async () => {
  sagemaker?.destroy();
  await server?.stop();
});

/** A KServe request whose BYTES input's data is `data`, the JSON text of its elements, after `padding` bytes. */
const kserveBody = (data: Buffer, padding = 0) =>
  Buffer.concat([
    Buffer.from(
      `{"parameters":{"padding":"${"x".repeat(padding)}"},"inputs":[{"name":"INPUT0","datatype":"BYTES","shape":[2],"data":[`,
    ),
    data,
    Buffer.from("]}]}"),
  ]);

/** The element texts: "ok", then a string holding 0xff 0xfe raw. */
const RAW = Buffer.concat([Buffer.from('"ok","a'), Buffer.from([0xff, 0xfe]), Buffer.from('"')]);
const LONE = Buffer.from('"ok","a\\ud800b"');

async function post(path: string, body: Buffer): Promise<{ status: number; json: unknown }> {
  const response = await fetch(`${server.url}${path}`, { method: "POST", body });
  return { status: response.status, json: await response.json() };
}

test("KServe over HTTP: raw bytes that are not UTF-8 are refused with their offset, small body or large", async () => {
  for (const padding of [0, OFF_THREAD_JSON_BYTES]) {
    const body = kserveBody(RAW, padding);
    const at = body.indexOf(0xff);
    assert.deepEqual(await post("/v2/models/bytes/infer", body), {
      status: 400,
      json: {
        error: `failed to parse the request JSON buffer: the body is not valid UTF-8 (byte 0xff) at ${at}`,
      },
    });
  }
});

test("KServe over HTTP: a lone surrogate is refused, naming the input and element, small body or large", async () => {
  for (const padding of [0, OFF_THREAD_JSON_BYTES]) {
    assert.deepEqual(await post("/v2/models/bytes/infer", kserveBody(LONE, padding)), {
      status: 400,
      json: {
        error:
          "unable to parse 'data' for input 'INPUT0': element 1 holds a lone surrogate (\\ud800), which UTF-8 cannot carry",
      },
    });
  }
  // A surrogate pair is a character, and goes through as its UTF-8.
  const pair = await post("/v2/models/bytes/infer", kserveBody(Buffer.from('"ok","\\ud83d\\ude00"')));
  assert.equal(pair.status, 200);
  assert.deepEqual((pair.json as { outputs: { data: string[] }[] }).outputs[0]!.data, ["ok", "😀"]);
});

test("KServe over WebSocket: a lone surrogate in a text message, and raw bytes in a framed one's JSON, are refused", async () => {
  const client = await StreamClient.open(
    { port: Number(new URL(server.url).port) },
    "/v2/models/bytes/stream",
  );
  try {
    client.send(kserveBody(LONE).toString("utf8"));
    assert.match(String((await client.nextText()).error), /element 1 holds a lone surrogate \(\\ud800\)/);
    const message = framed({ inputs: [{ name: "INPUT0", datatype: "BYTES", shape: [1], data: ["x"] }] });
    const at = message.indexOf("x", 4);
    message[at] = 0xff;
    client.send(message);
    assert.equal(
      (await client.nextText()).error,
      `failed to parse the request JSON buffer: the body is not valid UTF-8 (byte 0xff) at ${at - 4}`,
    );
  } finally {
    await client.close();
  }
});

test("TF-Serving REST: raw bytes are refused as JSON that is not valid, a lone surrogate naming its element", async () => {
  const raw = Buffer.concat([Buffer.from('{"instances":["ok","a'), Buffer.from([0xc3]), Buffer.from('"]}')]);
  assert.deepEqual(await post("/v1/models/bytes:predict", raw), {
    status: 412,
    json: {
      error: `The file is not valid json - Error: the body is not valid UTF-8 (byte 0xc3) Offset: ${raw.indexOf(0xc3)}`,
    },
  });
  const lone = await post("/v1/models/bytes:predict", Buffer.from('{"instances":["ok","\\udc00"]}'));
  assert.equal(lone.status, 400);
  assert.deepEqual(lone.json, {
    error: "element 1 of input 'INPUT0' holds a lone surrogate (\\udc00), which UTF-8 cannot carry",
  });
});

test("SageMaker: raw bytes and a lone surrogate are refused", async () => {
  const raw = Buffer.concat([Buffer.from('["ok","'), Buffer.from([0x80]), Buffer.from('"]')]);
  const refused = await sdkError(invoke(sagemaker, { body: raw }));
  assert.equal(refused.originalStatus, 400);
  assert.match(containerMessage(refused), /the body is not valid UTF-8 \(byte 0x80\) at 7/);
  const lone: SdkError = await sdkError(invoke(sagemaker, { body: kserveBody(LONE) }));
  assert.equal(lone.originalStatus, 400);
  assert.match(containerMessage(lone), /element 1 holds a lone surrogate \(\\ud800\)/);
});

test("a repository control body that is not UTF-8 is refused", async () => {
  const body = Buffer.concat([
    Buffer.from('{"parameters":{"config":"'),
    Buffer.from([0xe2, 0x82]),
    Buffer.from('"}}'),
  ]);
  assert.deepEqual(await post("/v2/repository/models/bytes/load", body), {
    status: 400,
    json: { error: `failed to parse the request JSON buffer: the body is not valid UTF-8 (byte 0xe2) at 25` },
  });
});
