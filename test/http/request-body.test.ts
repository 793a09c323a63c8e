import assert from "node:assert/strict";
import { request as httpRequest } from "node:http";
import { after, before, describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import {
  brotliCompressSync,
  deflateRawSync,
  deflateSync,
  gunzipSync,
  gzipSync,
  inflateSync,
} from "node:zlib";
import { negotiateCoding } from "../../src/frontends/common/http/response-compression.ts";
import { BIN, FREE_PORT_FLAGS, ServerProcess } from "../support/seqserve-process.ts";
import { bodyJson, type RawResponse, send, startServer, type TestServer } from "./support/http-server.ts";

const LIMIT = 64 * 1024;

const inferBody = (values: number[]): string =>
  JSON.stringify({ inputs: [{ name: "A", datatype: "INT32", shape: [values.length], data: values }] });

describe("request bodies", () => {
  let server: TestServer;
  before(async () => {
    server = await startServer({ bodyLimitBytes: LIMIT });
  });
  after(() => server.close());

  async function answersNext(): Promise<void> {
    const response = await send(server, "POST", "/v2/models/echo/infer", inferBody([9]));
    assert.equal(response.status, 200);
  }

  function dataOf(response: RawResponse): unknown {
    return (bodyJson(response) as { outputs: { data: unknown }[] }).outputs[0]?.data;
  }

  it("accepts JSON bodies with any content type, or none", async () => {
    for (const type of [
      undefined,
      "application/json",
      "text/plain",
      "application/x-www-form-urlencoded",
      "application/octet-stream",
      "application/json; charset=utf-8",
    ]) {
      const headers = type === undefined ? {} : { "content-type": type };
      const response = await send(server, "POST", "/v2/models/echo/infer", inferBody([1, 2]), headers);
      assert.equal(response.status, 200, `${type}: ${response.body}`);
      assert.deepEqual(dataOf(response), [1, 2]);
    }
  });

  it("a malformed Content-Type header is a 415 with the header named", async () => {
    const response = await send(server, "POST", "/v2/models/echo/infer", inferBody([1]), {
      "content-type": "json",
    });
    assert.equal(response.status, 415);
    assert.deepEqual(bodyJson(response), {
      error: "unsupported Content-Type 'json': expected a media type of the form type/subtype",
    });
    await answersNext();
  });

  for (const [coding, compress] of [
    ["gzip", gzipSync],
    ["deflate", deflateSync],
    ["deflate", deflateRawSync],
    ["br", brotliCompressSync],
  ] as const) {
    it(`decompresses ${coding} bodies (${compress.name})`, async () => {
      const values = Array.from({ length: 5000 }, (_, i) => i);
      const response = await send(server, "POST", "/v2/models/echo/infer", compress(inferBody(values)), {
        "content-encoding": coding,
        "content-type": "application/json",
      });
      assert.equal(response.status, 200, response.body.toString());
      assert.deepEqual(dataOf(response), values);
    });
  }

  it("decompresses binary-extension bodies; the header length counts decompressed bytes", async () => {
    const header = JSON.stringify({
      inputs: [{ name: "B", datatype: "UINT8", shape: [3], parameters: { binary_data_size: 3 } }],
    });
    const body = gzipSync(Buffer.concat([Buffer.from(header), Buffer.from([4, 5, 6])]));
    const response = await send(server, "POST", "/v2/models/echo/infer", body, {
      "content-encoding": "gzip",
      "inference-header-content-length": header.length,
    });
    assert.equal(response.status, 200, response.body.toString());
    assert.deepEqual(dataOf(response), [4, 5, 6]);
  });

  it("an unsupported or corrupt encoding is refused", async () => {
    const unsupported = await send(server, "POST", "/v2/models/echo/infer", inferBody([1]), {
      "content-encoding": "compress",
    });
    assert.equal(unsupported.status, 415);
    assert.equal(unsupported.headers["accept-encoding"], "gzip, deflate, br");
    assert.deepEqual(bodyJson(unsupported), {
      error: "unsupported Content-Encoding 'compress': the server accepts gzip, deflate, br or identity",
    });
    const corrupt = await send(server, "POST", "/v2/models/echo/infer", Buffer.from("not gzip at all"), {
      "content-encoding": "gzip",
    });
    assert.equal(corrupt.status, 400);
    assert.match(
      (bodyJson(corrupt) as { error: string }).error,
      /^unable to decompress the gzip request body: /,
    );
    await answersNext();
  });

  it("a body over the limit is a 413 stating the limit (Content-Length and chunked)", async () => {
    const big = inferBody(Array.from({ length: 40000 }, () => 1));
    assert.ok(big.length > LIMIT);
    const declared = await send(server, "POST", "/v2/models/echo/infer", big);
    assert.equal(declared.status, 413);
    assert.deepEqual(bodyJson(declared), {
      error: `request body is larger than the limit of ${LIMIT} bytes`,
    });
    await answersNext();

    const chunked = await new Promise<RawResponse>((resolve, reject) => {
      const request = httpRequest(
        { host: "127.0.0.1", port: server.port, method: "POST", path: "/v2/models/echo/infer", agent: false },
        (response) => {
          const chunks: Buffer[] = [];
          response.on("data", (c: Buffer) => chunks.push(c));
          response.on("end", () =>
            resolve({
              status: response.statusCode ?? 0,
              headers: response.headers,
              body: Buffer.concat(chunks),
            }),
          );
        },
      );
      request.on("error", reject);
      // No Content-Length: the body is sent chunked and counted as it arrives.
      for (let i = 0; i < big.length; i += 8192) request.write(big.slice(i, i + 8192));
      request.end();
    });
    assert.equal(chunked.status, 413);
    assert.deepEqual(bodyJson(chunked), { error: `request body is larger than the limit of ${LIMIT} bytes` });
    await answersNext();
  });

  it("a compressed body that inflates beyond the limit is a 413 (zip bomb)", async () => {
    const bomb = gzipSync(Buffer.alloc(64 * LIMIT, 0x20));
    assert.ok(bomb.length < LIMIT);
    const response = await send(server, "POST", "/v2/models/echo/infer", bomb, {
      "content-encoding": "gzip",
    });
    assert.equal(response.status, 413);
    assert.deepEqual(bodyJson(response), {
      error: `request body inflates to more than the limit of ${LIMIT} bytes`,
    });
    await answersNext();
  });

  it("malformed or empty JSON is a 400 with the parser's reason, in Triton's words", async () => {
    const malformed = await send(server, "POST", "/v2/models/echo/infer", '{"inputs": [', {
      "content-type": "application/json",
    });
    assert.equal(malformed.status, 400);
    assert.deepEqual(bodyJson(malformed), {
      error: "failed to parse the request JSON buffer: Invalid value. at 12",
    });
    const badValue = await send(server, "POST", "/v2/models/echo/infer", '{"inputs": [1,,2]}');
    assert.deepEqual(bodyJson(badValue), {
      error: "failed to parse the request JSON buffer: Invalid value. at 14",
    });
    const notObject = await send(server, "POST", "/v2/models/echo/infer", "[1,2]");
    assert.deepEqual(bodyJson(notObject), {
      error: "failed to parse the request JSON buffer: expected an object, got an array",
    });
    const empty = await send(server, "POST", "/v2/models/echo/infer", "", {
      "content-type": "application/json",
    });
    assert.equal(empty.status, 400);
    assert.deepEqual(bodyJson(empty), {
      error: "the request body is empty: expected an inference request JSON object",
    });
    const none = await send(server, "POST", "/v2/models/echo/infer");
    assert.equal(none.status, 400);
    await answersNext();
  });
});

describe("response compression", () => {
  let server: TestServer;
  before(async () => {
    server = await startServer();
  });
  after(() => server.close());

  const big = inferBody(Array.from({ length: 2000 }, (_, i) => i));

  it("negotiates the coding as Triton does", () => {
    assert.equal(negotiateCoding(undefined), "identity");
    assert.equal(negotiateCoding("gzip, deflate"), "gzip");
    assert.equal(negotiateCoding("gzip;q=0.5, deflate;q=0.8"), "deflate");
    assert.equal(negotiateCoding("br, identity"), "identity");
    assert.equal(negotiateCoding("gzip;q=0"), "identity");
  });

  for (const [coding, inflate] of [
    ["gzip", gunzipSync],
    ["deflate", inflateSync],
  ] as const) {
    it(`compresses large responses with ${coding} when accepted`, async () => {
      const response = await send(server, "POST", "/v2/models/echo/infer", big, {
        "accept-encoding": coding,
      });
      assert.equal(response.status, 200);
      assert.equal(response.headers["content-encoding"], coding);
      const json = JSON.parse(inflate(response.body).toString()) as { outputs: { data: number[] }[] };
      assert.equal(json.outputs[0]?.data.length, 2000);
    });
  }

  it("leaves small responses and clients that do not ask alone", async () => {
    const plain = await send(server, "POST", "/v2/models/echo/infer", big);
    assert.equal(plain.headers["content-encoding"], undefined);
    assert.equal((bodyJson(plain) as { outputs: unknown[] }).outputs.length, 1);
    const small = await send(server, "GET", "/v2", undefined, { "accept-encoding": "gzip" });
    assert.equal(small.headers["content-encoding"], undefined);
  });
});

describe("a body far over the limit, sent whole with its Content-Length", () => {
  // A server of its own process, as a client meets it: a client writes its whole body
  // before it reads, and a server that answered (and closed the connection) before
  // reading the body gave it a reset (EPIPE) where the 413 should be.
  let server: ServerProcess;
  let port: number;
  before(async () => {
    server = new ServerProcess(process.execPath, [
      BIN,
      ...FREE_PORT_FLAGS,
      "--model-repository",
      fileURLToPath(new URL("../../examples/models", import.meta.url)),
      "--http-max-body-bytes",
      String(LIMIT),
    ]);
    port = (await server.listening).http_port!;
  });
  after(() => server.stop());

  it("is read, and answered 413, not reset", async () => {
    const big = Buffer.alloc(128 * LIMIT, 0x20);
    const outcome = () =>
      new Promise<string>((resolve) => {
        const request = httpRequest(
          {
            host: "127.0.0.1",
            port,
            method: "POST",
            path: "/v2/models/simple/infer",
            agent: false,
            headers: { "content-length": big.byteLength },
          },
          (response) => {
            response.resume();
            response.on("end", () => resolve(`status ${response.statusCode}`));
          },
        );
        request.on("error", (error: NodeJS.ErrnoException) => resolve(`error ${error.code}`));
        request.end(big);
      });
    const outcomes: string[] = [];
    for (let i = 0; i < 5; i++) outcomes.push(await outcome());
    assert.deepEqual(outcomes, Array(5).fill("status 413"));
  });
});
