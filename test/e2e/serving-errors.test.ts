import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { gzipSync } from "node:zlib";
import { addSubModel } from "../../tools/onnx/test-models.ts";
import { infer, inferBody, outputData } from "../support/http-client.ts";
import { startTestServer, type TestServer } from "../support/test-server.ts";
import {
  difference,
  errorOf,
  type RawAnswer,
  rawPost,
  rowsOf,
  simpleConfig,
  simpleInputs,
  sum,
} from "./support/serving.ts";

// Bad requests to a real server with a real model: each gets a precise 4xx whose message
// names the problem, and the server goes on serving (a good request right after each).

const SIMPLE = { config: simpleConfig("simple"), onnx: addSubModel("INT32", [-1, 16]) };

let server: TestServer;
before(async () => {
  server = await startTestServer({ simple: SIMPLE });
});
after(() => server.stop());

let goodSeed = 0;
/** A good request right after a bad one: answered, and with its own data. */
async function stillServes(target: TestServer = server): Promise<void> {
  const a = rowsOf(++goodSeed, 2);
  const b = rowsOf(goodSeed + 100, 2);
  const answer = await infer(target.url, "simple", simpleInputs(a, b));
  assert.deepEqual(outputData(answer, "OUTPUT0"), sum(a, b));
  assert.deepEqual(outputData(answer, "OUTPUT1"), difference(a, b));
}

const inferUrl = (model = "simple") => `${server.url}/v2/models/${model}/infer`;
const json = (body: unknown) => (typeof body === "string" ? body : JSON.stringify(body));
const postInfer = (body: unknown, model?: string): Promise<RawAnswer> =>
  rawPost(inferUrl(model), json(body), { "content-type": "application/json" });

const a16 = rowsOf(1);
const good = () => simpleInputs(a16, a16);

/** A binary request: `header` JSON, then `bytes`; the header length is the JSON's unless given. */
function postBinary(header: unknown, bytes: Uint8Array, headerLength?: string): Promise<RawAnswer> {
  const text = Buffer.from(JSON.stringify(header));
  return rawPost(inferUrl(), Buffer.concat([text, bytes]), {
    "inference-header-content-length": headerLength ?? String(text.byteLength),
    "content-type": "application/octet-stream",
  });
}

const int32Bytes = (values: readonly number[]) => Buffer.from(new Int32Array(values).buffer);
const binaryInput = (name: string, size: number, shape: number[] = [1, 16]) => ({
  name,
  datatype: "INT32",
  shape,
  parameters: { binary_data_size: size },
});

interface Case {
  readonly name: string;
  readonly send: () => Promise<RawAnswer>;
  readonly status: number;
  /** The exact message, or a pattern it must match. */
  readonly error: string | RegExp;
}

const CASES: readonly Case[] = [
  {
    name: "malformed JSON",
    send: () => postInfer('{"inputs": [{"name": "INPUT0",'),
    status: 400,
    error: "failed to parse the request JSON buffer: Missing a name for object member. at 30",
  },
  {
    name: "a JSON body that is not an object",
    send: () => postInfer("[1, 2, 3]"),
    status: 400,
    error: "failed to parse the request JSON buffer: expected an object, got an array",
  },
  {
    name: "an empty body",
    send: () => postInfer(""),
    status: 400,
    error: "the request body is empty: expected an inference request JSON object",
  },
  {
    name: "no inputs member",
    send: () => postInfer({ id: "x" }),
    status: 400,
    error: "Unable to parse 'inputs': the request has no 'inputs' member",
  },
  {
    name: "an unknown model",
    send: () => postInfer({ inputs: good() }, "nope"),
    status: 404,
    error: "Request for unknown model: 'nope' is not found",
  },
  {
    name: "an unknown version",
    send: () => postInfer({ inputs: good() }, "simple/versions/9"),
    status: 404,
    error: "Request for unknown model: 'simple' version 9 is not found",
  },
  {
    name: "a version that is not a number",
    send: () => postInfer({ inputs: good() }, "simple/versions/latest"),
    status: 400,
    error:
      "failed to get model version from specified version string 'latest', version should be an integral value > 0",
  },
  {
    name: "a wrong input name",
    send: () => postInfer({ inputs: [good()[0], { ...good()[1], name: "INPUT9" }] }),
    status: 400,
    error: "unexpected inference input 'INPUT9' for model 'simple'",
  },
  {
    name: "a missing input",
    send: () => postInfer({ inputs: [good()[0]] }),
    status: 400,
    error:
      "[request id: <id_unknown>] expected 2 inputs but got 1 inputs for model 'simple'. Got input(s) ['INPUT0'], but missing required input(s) ['INPUT1']. Please provide all required input(s).",
  },
  {
    // Triton counts the inputs before it looks at their names, and its list of the missing
    // ones, when none is missing, is written "]".
    name: "an input too many",
    send: () => postInfer({ inputs: [...good(), { ...good()[1], name: "INPUT9" }] }),
    status: 400,
    error:
      "[request id: <id_unknown>] expected 2 inputs but got 3 inputs for model 'simple'. Got input(s) ['INPUT0','INPUT1','INPUT9'], but missing required input(s) ]. Please provide all required input(s).",
  },
  {
    name: "an unknown output",
    send: () => postInfer({ inputs: good(), outputs: [{ name: "OUTPUT7" }] }),
    status: 400,
    error: "unexpected inference output 'OUTPUT7' for model 'simple'",
  },
  {
    name: "a wrong shape",
    send: () =>
      postInfer({
        inputs: simpleInputs(a16, a16).map((i) => ({ ...i, shape: [1, 8, 2] })),
      }),
    status: 400,
    error:
      /^\[request id: <id_unknown>\] unexpected shape for input 'INPUT0' for model 'simple'\. Expected \[-1,16\], got \[1,8,2\]\./,
  },
  {
    name: "a shape of 100,000 dimensions, named in a short message",
    send: () =>
      postInfer({
        inputs: simpleInputs(a16, a16).map((i) => ({ ...i, shape: new Array(100_000).fill(1) })),
      }),
    status: 400,
    error:
      "unable to parse 'data' for input 'INPUT0': shape [1,1,1,1,1,1,1,1,...(100000 dimensions)...,1,1] has 1 elements, but 'data' holds 16",
  },
  {
    name: "data that disagrees with the shape",
    send: () => postInfer({ inputs: [{ ...good()[0], data: a16.slice(0, 15) }, good()[1]] }),
    status: 400,
    error: "unable to parse 'data' for input 'INPUT0': shape [1,16] has 16 elements, but 'data' holds 15",
  },
  {
    name: "a batch above max_batch_size",
    send: () => postInfer({ inputs: simpleInputs(rowsOf(1, 9), rowsOf(2, 9)) }),
    status: 400,
    error: "[request id: <id_unknown>] inference request batch-size must be <= 8 for 'simple'",
  },
  {
    name: "a wrong datatype",
    send: () => postInfer({ inputs: [{ ...good()[0], datatype: "FP32" }, good()[1]] }),
    status: 400,
    error:
      "[request id: <id_unknown>] inference input 'INPUT0' data-type is 'FP32', but model 'simple' expects 'INT32'",
  },
  {
    name: "a datatype that does not exist",
    send: () => postInfer({ inputs: [{ ...good()[0], datatype: "INT33" }, good()[1]] }),
    status: 400,
    error: "invalid datatype 'INT33' for input 'INPUT0' for model 'simple'",
  },
  {
    name: "an element out of its datatype's range",
    send: () => postInfer({ inputs: [{ ...good()[0], data: [2 ** 31, ...a16.slice(1)] }, good()[1]] }),
    status: 400,
    error:
      "unable to parse 'data' for input 'INPUT0': element 0 is 2147483648, but INT32 expects an integer in [-2147483648, 2147483647]",
  },
  {
    name: "binary data shorter than binary_data_size says",
    send: () =>
      postBinary(
        { inputs: [binaryInput("INPUT0", 64), binaryInput("INPUT1", 64)] },
        int32Bytes(rowsOf(1, 2)).subarray(0, 124),
      ),
    status: 400,
    error: "unexpected size for input 'INPUT1', expecting 4 additional bytes for model 'simple'",
  },
  {
    name: "binary data beyond what the inputs claim",
    send: () =>
      postBinary(
        { inputs: [binaryInput("INPUT0", 64), binaryInput("INPUT1", 64)] },
        int32Bytes(rowsOf(1, 3)).subarray(0, 132),
      ),
    status: 400,
    error: "unexpected additional input data for model 'simple': 4 bytes follow the last binary input",
  },
  {
    name: "a binary_data_size that disagrees with the shape",
    send: () =>
      postBinary(
        { inputs: [binaryInput("INPUT0", 60), binaryInput("INPUT1", 68)] },
        int32Bytes(rowsOf(1, 2)),
      ),
    status: 400,
    error:
      "[request id: <id_unknown>] input byte size mismatch for input 'INPUT0' for model 'simple'. Expected 64, got 60",
  },
  {
    name: "an Inference-Header-Content-Length beyond the body",
    send: () =>
      postBinary(
        { inputs: [binaryInput("INPUT0", 64), binaryInput("INPUT1", 64)] },
        int32Bytes(rowsOf(1, 2)),
        "100000",
      ),
    status: 400,
    error: /^inference header size should be in range \(0, \d+\), got: 100000/,
  },
  {
    name: "an Inference-Header-Content-Length that is not a number",
    send: () => postBinary({ inputs: [] }, new Uint8Array(0), "ten"),
    status: 400,
    error: "Unable to parse Inference-Header-Content-Length, got: ten",
  },
  {
    name: "binary inputs without Inference-Header-Content-Length",
    send: () =>
      rawPost(
        inferUrl(),
        JSON.stringify({ inputs: [binaryInput("INPUT0", 64), binaryInput("INPUT1", 64)] }),
        {
          "content-type": "application/json",
        },
      ),
    status: 400,
    error:
      "must specify a valid 'Inference-Header-Content-Length' header when passing inputs in binary data format (input 'INPUT0' sets 'binary_data_size')",
  },
];

describe("bad requests get a precise 4xx, and the server goes on serving", () => {
  for (const c of CASES) {
    it(c.name, async () => {
      const answer = await c.send();
      assert.equal(answer.status, c.status, answer.text);
      assert.equal(answer.headers.get("content-type")?.startsWith("application/json"), true);
      const message = errorOf(answer);
      if (typeof c.error === "string") assert.equal(message, c.error);
      else assert.match(message, c.error);
      await stillServes();
    });
  }

  it("a good binary request is answered after all of them", async () => {
    const a = rowsOf(7, 2);
    const b = rowsOf(8, 2);
    const answer = await postBinary(
      { inputs: [binaryInput("INPUT0", 128, [2, 16]), binaryInput("INPUT1", 128, [2, 16])] },
      Buffer.concat([int32Bytes(a), int32Bytes(b)]),
    );
    assert.equal(answer.status, 200, answer.text);
    const body = JSON.parse(answer.text) as { outputs: { name: string; data: number[] }[] };
    assert.deepEqual(body.outputs.find((o) => o.name === "OUTPUT0")?.data, sum(a, b));
  });
});

describe("request bodies above the configured limit", () => {
  const LIMIT = 2048;
  let small: TestServer;
  before(async () => {
    small = await startTestServer({ simple: SIMPLE }, { httpBodyLimitBytes: LIMIT });
  });
  after(() => small.stop());

  const bigBody = () => inferBody(simpleInputs(rowsOf(100000, 8), rowsOf(200000, 8)));

  it("a body just within the limit is served", async () => {
    await stillServes(small);
  });

  it("a larger body is a 413 naming the limit", async () => {
    const body = bigBody();
    assert.ok(Buffer.byteLength(body) > LIMIT);
    const answer = await rawPost(`${small.url}/v2/models/simple/infer`, body, {
      "content-type": "application/json",
    });
    assert.equal(answer.status, 413);
    assert.equal(errorOf(answer), `request body is larger than the limit of ${LIMIT} bytes`);
    await stillServes(small);
  });

  it("a compressed body is measured after decompression", async () => {
    const compressed = gzipSync(bigBody());
    assert.ok(compressed.byteLength < LIMIT, "the compressed body itself fits");
    const answer = await rawPost(`${small.url}/v2/models/simple/infer`, compressed, {
      "content-type": "application/json",
      "content-encoding": "gzip",
    });
    assert.equal(answer.status, 413);
    assert.equal(errorOf(answer), `request body inflates to more than the limit of ${LIMIT} bytes`);
    await stillServes(small);
  });
});
