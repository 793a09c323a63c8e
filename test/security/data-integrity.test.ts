import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { asServerError, INTERNAL_ERROR_MESSAGE } from "../../src/core/errors.ts";
import { OnnxModelBuilder } from "../../tools/onnx/onnx-model-builder.ts";
import { identityModel } from "../../tools/onnx/test-models.ts";
import { TestClient } from "../grpc/support/grpc-harness.ts";
import { infer, inferBinary, outputData } from "../support/http-client.ts";
import { startTestServer, type TestServer } from "../support/test-server.ts";

// BYTES elements reach ONNX Runtime unchanged or not at all: its Node.js binding passes
// strings as C strings, so "a\0b" used to reach the model as "a". And what a client is
// told of a failure never carries the server's internals: ONNX Runtime's C++ file names,
// lines and functions, or a JavaScript engine's own messages.

const STRINGS = `
name: "strings"
backend: "onnxruntime"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_STRING dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_STRING dims: [ -1 ] } ]
dynamic_batching { }
`;

/** C = A + B on two vectors of their own lengths: lengths 2 and 3 fail inside ONNX Runtime. */
const BROADCAST = new OnnxModelBuilder({ opset: 17 })
  .input("A", "FP32", ["n"])
  .input("B", "FP32", ["m"])
  .output("C", "FP32", [-1])
  .node("Add", ["A", "B"], ["C"])
  .toBytes();

let server: TestServer;
let grpc: TestClient;
before(async () => {
  server = await startTestServer({
    strings: { config: STRINGS, onnx: identityModel("BYTES", [-1, -1]) },
    adder: {
      onnx: BROADCAST,
      config: `name: "adder"
backend: "onnxruntime"
max_batch_size: 0
input [ { name: "A" data_type: TYPE_FP32 dims: [ -1 ] }, { name: "B" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "C" data_type: TYPE_FP32 dims: [ -1 ] } ]`,
    },
  });
  grpc = new TestClient(server.grpcPort);
});
after(async () => {
  grpc.close();
  await server.stop();
});

describe("BYTES elements with a NUL byte", () => {
  test("are refused with a message naming the element, over HTTP JSON, binary and gRPC", async () => {
    const json = await infer(server.url, "strings", [
      { name: "INPUT0", datatype: "BYTES", shape: [1, 2], data: ["fine", "a\u0000b"] },
    ]);
    assert.equal(json.status, 400);
    assert.match(
      String(json.body.error),
      /element 1 of BYTES input 'INPUT0' holds a NUL byte \(at offset 1\)/,
    );

    const element = Buffer.from("x\0y");
    const raw = Buffer.concat([Buffer.from(new Uint32Array([element.length]).buffer), element]);
    const binary = await inferBinary(server.url, "strings", [
      { name: "INPUT0", datatype: "BYTES", shape: [1, 1], data: raw },
    ]);
    assert.equal(binary.status, 400);
    assert.match(String(binary.error), /NUL byte/);

    await assert.rejects(
      grpc.unary("ModelInfer", {
        model_name: "strings",
        inputs: [
          { name: "INPUT0", datatype: "BYTES", shape: [1, 1], contents: { bytes_contents: [element] } },
        ],
      }),
      (error: Error & { code: number }) => error.code === 3 && /NUL byte/.test(error.message),
    );
  });

  test("a refused element fails only its own request, before it can share a batch: the requests sent beside it are exact", async () => {
    const good = Array.from({ length: 6 }, (_, i) =>
      infer(server.url, "strings", [
        { name: "INPUT0", datatype: "BYTES", shape: [1, 1], data: [`value ${i} é`] },
      ]),
    );
    const bad = infer(server.url, "strings", [
      { name: "INPUT0", datatype: "BYTES", shape: [1, 1], data: ["\u0000"] },
    ]);
    const answers = await Promise.all(good);
    answers.forEach((answer, i) => {
      assert.deepEqual(outputData(answer, "OUTPUT0"), [`value ${i} é`]);
    });
    const refused = await bad;
    assert.equal(refused.status, 400);
    assert.match(refused.body.error as string, /element 0 of BYTES input 'INPUT0' holds a NUL byte/);
  });
});

describe("what a client is told of a failure", () => {
  test("ONNX Runtime's message without its C++ file, line and function", async () => {
    const answer = await infer(server.url, "adder", [
      { name: "A", datatype: "FP32", shape: [2], data: [1, 2] },
      { name: "B", datatype: "FP32", shape: [3], data: [1, 2, 3] },
    ]);
    assert.ok(answer.status >= 400, JSON.stringify(answer.body));
    const message = String(answer.body.error);
    assert.match(message, /Attempting to broadcast an axis by a dimension other than 1/);
    assert.doesNotMatch(message, /\.(h|cc|cpp):\d+|onnxruntime::|onnxruntime_src/);
  });

  test("a JavaScript engine's own message stays in the log", () => {
    for (const error of [
      new RangeError("Invalid typed array length: 4294967296"),
      new TypeError("x is not a function"),
    ]) {
      const answer = asServerError(error);
      assert.equal(answer.code, "INTERNAL");
      assert.equal(answer.message, INTERNAL_ERROR_MESSAGE);
      assert.equal(answer.cause, error);
    }
  });
});
