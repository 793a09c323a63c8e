import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import { Validator } from "@seriousme/openapi-schema-validator";
import { OpenAPIBackend, type Document as OpenApiDocument } from "openapi-backend";
import { OnnxModelBuilder } from "../../tools/onnx/onnx-model-builder.ts";
import { startTestServer, type TestServer } from "../support/test-server.ts";

// GET /openapi.json on every HTTP server: an OpenAPI 3 document generated from the
// routes' schemas. The document must be valid OpenAPI, name every route a client uses, and
// describe what the server really answers: live responses of each route, successes and
// errors, are checked against it by an OpenAPI validator (openapi-backend), and the JSON
// requests sent against what it says a request is.

const EXAMPLES = fileURLToPath(new URL("../../examples/models", import.meta.url));

interface Exchange {
  readonly method: "GET" | "POST" | "DELETE";
  readonly path: string;
  readonly body?: unknown;
  readonly raw?: { readonly bytes: Buffer; readonly headers: Readonly<Record<string, string>> };
  readonly headers?: Readonly<Record<string, string>>;
  /** The status the server gives (each exchange is chosen for it). */
  readonly status: number;
}

const simpleInputs = (data: number[]) => [
  { name: "INPUT0", datatype: "INT32", shape: [1, 16], data },
  { name: "INPUT1", datatype: "INT32", shape: [1, 16], data },
];
const SIXTEEN = Array.from({ length: 16 }, (_, i) => i);

const KSERVE_EXCHANGES: readonly Exchange[] = [
  { method: "GET", path: "/v2", status: 200 },
  { method: "GET", path: "/v2/health/live", status: 200 },
  { method: "GET", path: "/v2/health/ready", status: 200 },
  { method: "GET", path: "/v2/models/stats", status: 200 },
  { method: "GET", path: "/v2/models/simple", status: 200 },
  { method: "GET", path: "/v2/models/simple/versions/1", status: 200 },
  { method: "GET", path: "/v2/models/nothing", status: 404 },
  { method: "GET", path: "/v2/models/simple/ready", status: 200 },
  { method: "GET", path: "/v2/models/simple/versions/9/ready", status: 400 },
  { method: "GET", path: "/v2/models/accumulator/config", status: 200 },
  { method: "GET", path: "/v2/models/simple/versions/1/config", status: 200 },
  { method: "GET", path: "/v2/models/simple/stats", status: 200 },
  { method: "GET", path: "/v2/models/simple/versions/1/stats", status: 200 },
  {
    method: "POST",
    path: "/v2/models/simple/infer",
    body: { id: "a", inputs: simpleInputs(SIXTEEN) },
    status: 200,
  },
  {
    method: "POST",
    path: "/v2/models/simple/versions/1/infer",
    body: { inputs: simpleInputs(SIXTEEN), parameters: { binary_data_output: true } },
    status: 200,
  },
  {
    method: "POST",
    path: "/v2/models/simple/infer",
    body: { inputs: [{ name: "INPUT0", datatype: "INT32", shape: [1, 16], data: SIXTEEN }] },
    status: 400,
  },
  {
    method: "POST",
    path: "/v2/models/accumulator/infer",
    body: {
      parameters: { sequence_id: 42, sequence_start: true },
      inputs: [{ name: "INPUT", datatype: "INT32", shape: [1, 1], data: [5] }],
    },
    status: 200,
  },
  { method: "GET", path: "/v2/models/accumulator/sequences", status: 200 },
  { method: "GET", path: "/v2/models/simple/sequences", status: 404 },
  { method: "DELETE", path: "/v2/models/accumulator/sequences/42", status: 200 },
  { method: "DELETE", path: "/v2/models/accumulator/versions/1/sequences/42", status: 404 },
  { method: "GET", path: "/v2/models/accumulator/stream", status: 426 },
  { method: "POST", path: "/v2/repository/index", body: { ready: true }, status: 200 },
  { method: "POST", path: "/v2/repository/models/simple/load", body: {}, status: 503 },
  { method: "POST", path: "/v2/repository/models/simple/unload", body: {}, status: 503 },
];

/** An invocation of `model` (its name in the Target-Model header), answered with `status`. */
const invocation = (path: string, model: string, body: unknown, status: number): Exchange => ({
  method: "POST",
  path,
  body,
  headers: { "x-amzn-sagemaker-target-model": model },
  status,
});

const SAGEMAKER_EXCHANGES: readonly Exchange[] = [
  { method: "GET", path: "/ping", status: 200 },
  invocation("/invocations", "simple", { inputs: simpleInputs(SIXTEEN) }, 200),
  invocation("/endpoints/any/invocations", "simple", { inputs: simpleInputs(SIXTEEN) }, 200),
  invocation("/endpoints/any/invocations-response-stream", "simple", { inputs: simpleInputs(SIXTEEN) }, 200),
  invocation("/invocations", "accumulator", { requestType: "NEW_SESSION" }, 200),
  invocation("/invocations", "nothing", { inputs: simpleInputs(SIXTEEN) }, 404),
  // The multi-model endpoint's routes (none loaded here).
  { method: "GET", path: "/models", status: 200 },
  { method: "GET", path: "/models/none", status: 404 },
  { method: "DELETE", path: "/models/none", status: 404 },
];

type Document = Record<string, unknown> & { paths: Record<string, Record<string, OperationObject>> };
interface OperationObject {
  readonly operationId: string;
  readonly responses: Record<string, { content?: Record<string, unknown> }>;
}

async function documentOf(base: string): Promise<Document> {
  // Not kept alive: reading a document into a validator holds this thread for seconds on
  // a busy machine, past the server's keep-alive timeout, and the next request would go
  // out on a connection the server had closed meanwhile (ECONNRESET).
  const response = await fetch(`${base}/openapi.json`, { headers: { connection: "close" } });
  assert.equal(response.status, 200);
  assert.match(response.headers.get("content-type") ?? "", /^application\/json/);
  return (await response.json()) as Document;
}

/** Sends each exchange and checks its answer (and JSON request) against the document. */
async function checkExchanges(
  base: string,
  document: Document,
  exchanges: readonly Exchange[],
): Promise<void> {
  const api = new OpenAPIBackend({
    definition: document as unknown as OpenApiDocument,
    quick: false,
    validate: true,
  });
  await api.init();
  for (const exchange of exchanges) {
    const where = `${exchange.method} ${exchange.path}`;
    const headers: Record<string, string> = { "accept-encoding": "identity", ...exchange.headers };
    let body: string | Buffer | undefined;
    if (exchange.body !== undefined) {
      headers["content-type"] = "application/json";
      body = JSON.stringify(exchange.body);
    }
    const request = {
      method: exchange.method.toLowerCase(),
      path: exchange.path,
      headers,
      body: exchange.body,
    };
    const operation = api.matchOperation(request);
    assert.ok(operation !== undefined, `${where} is in the document`);
    if (exchange.body !== undefined) {
      const checked = api.validateRequest(request, operation);
      assert.ok(
        checked.valid,
        `${where}: the request as the document says: ${JSON.stringify(checked.errors)}`,
      );
    }

    const response = await fetch(`${base}${exchange.path}`, { method: exchange.method, headers, body });
    const text = Buffer.from(await response.arrayBuffer());
    assert.equal(response.status, exchange.status, `${where}: ${text.toString()}`);
    const responses = (document.paths[operation.path]![operation.method] as OperationObject).responses;
    const declared = responses[String(response.status)] ?? responses.default;
    assert.ok(declared !== undefined, `${where}: status ${response.status} is documented`);
    const type = (response.headers.get("content-type") ?? "").split(";")[0]!;
    if (text.byteLength === 0) {
      assert.equal(declared.content, undefined, `${where}: an empty answer is documented as empty`);
      continue;
    }
    assert.ok(
      declared.content?.[type] !== undefined,
      `${where}: ${type} is documented for ${response.status}`,
    );
    if (type === "application/json") {
      const checked = api.validateResponse(JSON.parse(text.toString()), operation, response.status);
      assert.ok(
        checked.valid,
        `${where}: the answer as the document says: ${JSON.stringify(checked.errors)}`,
      );
    }
  }
}

describe("the OpenAPI documents", () => {
  let server: TestServer;
  let sagemaker: string;
  before(async () => {
    server = await startTestServer(EXAMPLES, { sagemakerPort: 0 });
    sagemaker = `http://127.0.0.1:${server.server.sagemakerPort}`;
  });
  after(() => server?.stop());

  it("are valid OpenAPI 3 documents, generated for each HTTP server", async () => {
    for (const base of [server.url, sagemaker]) {
      const document = await documentOf(base);
      assert.equal(document.openapi, "3.0.3");
      const result = await new Validator().validate(document as never);
      assert.ok(result.valid, JSON.stringify(result.errors));
      for (const operations of Object.values(document.paths)) {
        for (const operation of Object.values(operations)) assert.ok(operation.operationId);
      }
    }
  });

  it("describe every KServe v2 route and the sequence endpoints, with and without a version", async () => {
    const document = await documentOf(server.url);
    for (const path of [
      "/v2",
      "/v2/health/live",
      "/v2/health/ready",
      "/v2/models/stats",
      "/v2/models/{model}",
      "/v2/models/{model}/versions/{version}",
      "/v2/models/{model}/ready",
      "/v2/models/{model}/config",
      "/v2/models/{model}/stats",
      "/v2/models/{model}/infer",
      "/v2/models/{model}/versions/{version}/infer",
      "/v2/models/{model}/sequences",
      "/v2/models/{model}/sequences/{id}",
      "/v2/models/{model}/stream",
      "/v2/repository/index",
      "/v2/repository/models/{model}/load",
      "/v2/repository/models/{model}/unload",
    ]) {
      assert.ok(document.paths[path] !== undefined, path);
    }
    assert.ok(document.paths["/openapi.json"] === undefined, "the document does not list itself");
  });

  it("match the KServe v2 server's live answers, successes and errors", async () => {
    await checkExchanges(server.url, await documentOf(server.url), KSERVE_EXCHANGES);
  });

  it("match Triton's generate answers: inputs and outputs as a value or a list, and no body", async () => {
    const text = await startTestServer({
      text: {
        onnx: new OnnxModelBuilder({ opset: 17 })
          .input("text_input", "BYTES", [-1])
          .output("text_output", "BYTES", [-1])
          .node("Identity", ["text_input"], ["text_output"])
          .toBytes(),
      },
    });
    try {
      const document = await documentOf(text.url);
      await checkExchanges(text.url, document, [
        { method: "POST", path: "/v2/models/text/generate", body: { text_input: "a" }, status: 200 },
        { method: "POST", path: "/v2/models/text/generate", body: { text_input: ["a", "b"] }, status: 200 },
        { method: "POST", path: "/v2/models/text/generate_stream", body: { text_input: ["a"] }, status: 200 },
      ]);
      for (const path of ["/v2/models/{model}/generate", "/v2/models/{model}/generate_stream"]) {
        const body = (document.paths[path]!.post as unknown as { requestBody: { required?: boolean } })
          .requestBody;
        assert.notEqual(body.required, true, `${path}: an empty body is answered, so the body is optional`);
      }
    } finally {
      await text.stop();
    }
  });

  it("match the SageMaker server's live answers", async () => {
    const document = await documentOf(sagemaker);
    assert.deepEqual(Object.keys(document.paths).sort(), [
      "/endpoints/{endpoint}/invocations",
      "/endpoints/{endpoint}/invocations-response-stream",
      "/invocations",
      "/models",
      "/models/{name}",
      "/models/{name}/invoke",
      "/ping",
    ]);
    await checkExchanges(sagemaker, document, SAGEMAKER_EXCHANGES);
  });
});
