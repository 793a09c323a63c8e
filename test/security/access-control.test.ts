import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { InterceptingCall, type Interceptor, type StatusObject } from "@grpc/grpc-js";
import WebSocket from "ws";
import { type ApiKey, OPEN_ACCESS, securityOptions } from "../../src/config/security-options.ts";
import { accumulatorModel } from "../../tools/onnx/sequence-models.ts";
import { identityModel } from "../../tools/onnx/test-models.ts";
import { TestClient } from "../grpc/support/grpc-harness.ts";
import { containerMessage, invoke, sdkClient, sdkError } from "../sagemaker/support/sagemaker-kit.ts";
import { accumulatorRequest, errorOf, int32Output } from "../support/grpc-stream-call.ts";
import { inferBody } from "../support/http-client.ts";
import { accumulatorConfig } from "../support/sequence-kit.ts";
import { startTestServer, type TestServer } from "../support/test-server.ts";
import { TfsClient } from "../tfs/support/tfs-client.ts";
import { type LogLine, memoryLogger } from "./support/memory-logger.ts";

// API keys on every frontend and every restricted API: inference for tenants, model
// control, the sequences API and metrics for operators; 401 / UNAUTHENTICATED without a
// valid key, 403 / PERMISSION_DENIED with one that does not open the API; health open.
// A sequence (a SageMaker session too) belongs to the key that started it. Keys never
// reach the log. And Triton's own restricted-API flags.

const KEYS: ApiKey[] = [
  { name: "tenant-a", secret: "a-secret-key-0123456789", groups: ["inference", "metadata"] },
  { name: "tenant-b", secret: "b-secret-key-0123456789", groups: ["inference"] },
  {
    name: "ops",
    secret: "ops-secret-key-0123456789",
    groups: ["model-repository", "sequences", "metrics", "statistics"],
  },
];
const [A, B, OPS] = KEYS.map((k) => k.secret) as [string, string, string];
const bearer = (key: string) => ({ authorization: `Bearer ${key}` });

const MODELS = {
  floats: { onnx: identityModel("FP32", [-1, 4]) },
  acc: {
    config: accumulatorConfig(
      "acc",
      4,
      "max_sequence_idle_microseconds: 60000000\n  oldest { max_candidate_sequences: 8 }",
    ),
    onnx: accumulatorModel(),
  },
};
const FLOATS = JSON.stringify({
  inputs: [{ name: "INPUT0", datatype: "FP32", shape: [1, 4], data: [1, 2, 3, 4] }],
});

/** A grpc-js channel option adding `headers` to every call's metadata. */
function withMetadata(headers: Record<string, string>): { interceptors: Interceptor[] } {
  const interceptor: Interceptor = (options, nextCall) =>
    new InterceptingCall(nextCall(options), {
      start(metadata, listener, next) {
        for (const [name, value] of Object.entries(headers)) metadata.set(name, value);
        next(metadata, listener);
      },
    });
  return { interceptors: [interceptor] };
}

const grpcCode = async (call: Promise<unknown>): Promise<number> =>
  call.then(
    () => 0,
    (error: { code: number }) => error.code,
  );

let server: TestServer;
const lines: LogLine[] = [];
before(async () => {
  server = await startTestServer(
    MODELS,
    {
      modelControlMode: "explicit",
      loadModels: ["*"],
      sagemakerPort: 0,
      security: securityOptions({ access: { ...OPEN_ACCESS, apiKeys: KEYS } }),
    },
    memoryLogger(lines, "debug"),
  );
});
after(() => server.stop());

const http = (path: string, init: RequestInit = {}) => fetch(`${server.url}${path}`, init);
const postInfer = (headers: Record<string, string>, model = "floats", body = FLOATS) =>
  http(`/v2/models/${model}/infer`, {
    method: "POST",
    headers: { "content-type": "application/json", ...headers },
    body,
  });

describe("HTTP", () => {
  test("inference: 401 without a key or with an unknown one, 403 with a key for other APIs, 200 with a tenant's", async () => {
    const none = await postInfer({});
    assert.equal(none.status, 401);
    assert.equal(none.headers.get("www-authenticate"), 'Bearer realm="seqserve"');
    assert.match(((await none.json()) as { error: string }).error, /inference API needs an API key/);
    const unknown = await postInfer(bearer("not-a-key-at-all-000000"));
    assert.equal(unknown.status, 401);
    assert.deepEqual(await unknown.json(), { error: "the API key is not valid" });
    const ops = await postInfer(bearer(OPS));
    assert.equal(ops.status, 403);
    assert.deepEqual(await ops.json(), { error: "the API key 'ops' does not open the inference API" });
    assert.equal((await postInfer(bearer(A))).status, 200);
    assert.equal((await postInfer({ "x-api-key": B })).status, 200);
  });

  test("health is open; metadata, model control, the sequences API and statistics need their keys", async () => {
    assert.equal((await http("/v2/health/ready")).status, 200);
    assert.equal((await http("/v2/models/floats/ready")).status, 200);
    assert.equal((await http("/v2/models/floats")).status, 401);
    assert.equal((await http("/v2/models/floats", { headers: bearer(A) })).status, 200);
    assert.equal((await http("/v2/models/floats", { headers: bearer(B) })).status, 403);
    const index = (key: string) => http("/v2/repository/index", { method: "POST", headers: bearer(key) });
    assert.equal((await index(A)).status, 403);
    assert.equal((await index(OPS)).status, 200);
    const unload = await http("/v2/repository/models/floats/unload", { method: "POST", headers: bearer(A) });
    assert.equal(unload.status, 403);
    assert.equal((await http("/v2/models/acc/sequences", { headers: bearer(A) })).status, 403);
    assert.equal((await http("/v2/models/acc/sequences", { headers: bearer(OPS) })).status, 200);
    assert.equal((await http("/v2/models/stats", { headers: bearer(A) })).status, 403);
    assert.equal((await http("/v2/models/stats", { headers: bearer(OPS) })).status, 200);
  });

  test("Triton's generate, WebSocket streams and TF-Serving REST", async () => {
    const generate = (headers: Record<string, string>) =>
      http("/v2/models/floats/generate", {
        method: "POST",
        headers,
        body: JSON.stringify({ INPUT0: [1, 2, 3, 4] }),
      });
    assert.equal((await generate({})).status, 401);
    assert.equal((await generate(bearer(A))).status, 200);

    const upgrade = (headers: Record<string, string>) =>
      new Promise<number>((resolve) => {
        const socket = new WebSocket(`ws://127.0.0.1:${server.server.httpPort}/v2/models/floats/stream`, {
          headers,
        });
        socket.on("unexpected-response", (_request, response) => resolve(response.statusCode ?? 0));
        socket.on("open", () => {
          socket.close();
          resolve(101);
        });
        socket.on("error", () => {});
      });
    assert.equal(await upgrade({}), 401);
    assert.equal(await upgrade(bearer(OPS)), 403);
    assert.equal(await upgrade(bearer(A)), 101);

    const predict = (headers: Record<string, string>) =>
      http("/v1/models/floats:predict", {
        method: "POST",
        headers,
        body: JSON.stringify({ instances: [[1, 2, 3, 4]] }),
      });
    assert.equal((await predict({})).status, 401);
    assert.equal((await predict(bearer(B))).status, 200);
    assert.equal((await http("/v1/models/floats")).status, 200, "a model's status is health: open");
    assert.equal((await http("/v1/models/floats/metadata")).status, 401);
    // However the path spells it (encoded, a trailing slash), metadata needs its key.
    for (const path of [
      "/v1/models/floats/metadat%61",
      "/v1/models/floats/%6Detadata",
      "/v1/models/floats/versions/1/metadat%61",
      "/v1/models/floats/metadata/",
    ]) {
      assert.equal((await http(path)).status, 401, path);
    }
    assert.equal((await http("/v1/models/floats/versions/1/")).status, 200, "a version's status, open");
  });

  test("metrics need the operator's key", async () => {
    assert.equal((await fetch(server.metricsUrl)).status, 401);
    assert.equal((await fetch(server.metricsUrl, { headers: bearer(A) })).status, 403);
    const allowed = await fetch(server.metricsUrl, { headers: bearer(OPS) });
    assert.equal(allowed.status, 200);
    assert.match(
      await allowed.text(),
      /seqserve_auth_refusals_total\{api="inference",reason="missing"\} [1-9]/,
    );
  });
});

describe("gRPC", () => {
  test("KServe and TF-Serving services: UNAUTHENTICATED, PERMISSION_DENIED, served", async () => {
    const anonymous = new TestClient(server.grpcPort);
    const tenant = new TestClient(server.grpcPort, withMetadata(bearer(A)));
    const ops = new TestClient(server.grpcPort, withMetadata({ "x-api-key": OPS }));
    const infer = {
      model_name: "floats",
      inputs: [
        { name: "INPUT0", datatype: "FP32", shape: [1, 4], contents: { fp32_contents: [1, 2, 3, 4] } },
      ],
    };
    try {
      assert.equal(await grpcCode(anonymous.unary("ModelInfer", infer)), 16);
      assert.equal(await grpcCode(ops.unary("ModelInfer", infer)), 7);
      assert.equal(await grpcCode(tenant.unary("ModelInfer", infer)), 0);
      assert.equal(await grpcCode(anonymous.unary("ServerLive")), 0);
      assert.equal(await grpcCode(tenant.unary("RepositoryIndex")), 7);
      assert.equal(await grpcCode(ops.unary("RepositoryIndex")), 0);
      assert.equal(await grpcCode(anonymous.health("Check")), 0);
      const stream = anonymous.stream();
      stream.on("error", () => {});
      const ended = new Promise<StatusObject>((resolve) => stream.on("status", resolve));
      stream.write(accumulatorRequest("acc", 1, { id: 1, start: true }));
      assert.equal((await ended).code, 16);
      for (const [client, code] of [
        [new TfsClient(server.grpcPort), 16],
        [new TfsClient(server.grpcPort, withMetadata(bearer(B))), 0],
      ] as const) {
        const predict = client.predict({
          model_spec: { name: "floats" },
          inputs: {
            INPUT0: {
              dtype: "DT_FLOAT",
              tensor_shape: { dim: [{ size: 1 }, { size: 4 }] },
              float_val: [1, 2, 3, 4],
            },
          },
        });
        assert.equal(await grpcCode(predict), code);
        client.close();
      }
    } finally {
      for (const client of [anonymous, tenant, ops]) client.close();
    }
  });
});

describe("a sequence belongs to the key that started it", () => {
  const step = (key: string, value: number, params: Record<string, unknown>) =>
    postInfer(
      bearer(key),
      "acc",
      inferBody([{ name: "INPUT", datatype: "INT32", shape: [1, 1], data: [value] }], params),
    );

  test("over HTTP: another tenant can neither continue, restart nor end it", async () => {
    assert.equal((await step(A, 5, { id: 77, start: true })).status, 200);
    for (const params of [{ id: 77 }, { id: 77, start: true }, { id: 77, end: true }]) {
      const other = await step(B, 1, params);
      assert.equal(other.status, 403, JSON.stringify(params));
      assert.match(
        ((await other.json()) as { error: string }).error,
        /sequence 77 of model 'acc' belongs to another caller/,
      );
    }
    const mine = await step(A, 3, { id: 77, end: true });
    assert.deepEqual(((await mine.json()) as { outputs: { data: number[] }[] }).outputs[0]!.data, [8]);
  });

  test("over a WebSocket: the stream's sequence is its key's; another tenant cannot continue it over HTTP", async () => {
    const socket = new WebSocket(
      `ws://127.0.0.1:${server.server.httpPort}/v2/models/acc/stream?sequence_id=88`,
      { headers: bearer(A) },
    );
    socket.on("error", () => {});
    await new Promise((resolve, reject) => {
      socket.once("open", resolve);
      socket.once("unexpected-response", () => reject(new Error("the upgrade was refused")));
    });
    type Answer = { outputs: { data: number[] }[] };
    const answer = new Promise<Answer>((resolve) =>
      socket.once("message", (data: Buffer) => resolve(JSON.parse(data.toString()) as Answer)),
    );
    socket.send(JSON.stringify({ inputs: [{ name: "INPUT", datatype: "INT32", shape: [1, 1], data: [5] }] }));
    assert.deepEqual((await answer).outputs[0]!.data, [5]);
    try {
      const other = await step(B, 1, { id: 88 });
      assert.equal(other.status, 403);
      assert.match(((await other.json()) as { error: string }).error, /belongs to another caller/);
      const owner = await step(A, 1, { id: 88 });
      assert.equal(owner.status, 200);
      assert.deepEqual(
        ((await owner.json()) as Answer).outputs[0]!.data,
        [6],
        "the owner's sequence went on from its own state",
      );
    } finally {
      socket.close();
    }
  });

  test("over a WebSocket that continues a sequence: another tenant is refused before the upgrade; the owner takes it over", async () => {
    assert.equal((await step(A, 5, { id: 89, start: true })).status, 200);
    const upgrade = (key: string) =>
      new Promise<{ status: number; socket?: WebSocket }>((resolve) => {
        const socket = new WebSocket(
          `ws://127.0.0.1:${server.server.httpPort}/v2/models/acc/stream?sequence_id=89&sequence_start=false`,
          { headers: bearer(key) },
        );
        socket.on("error", () => {});
        socket.once("open", () => resolve({ status: 101, socket }));
        socket.once("unexpected-response", (_request, response) =>
          resolve({ status: response.statusCode ?? 0 }),
        );
      });
    assert.equal((await upgrade(B)).status, 403);
    const mine = await upgrade(A);
    assert.equal(mine.status, 101);
    type Answer = { outputs: { data: number[] }[] };
    const answer = new Promise<Answer>((resolve) =>
      mine.socket!.once("message", (data: Buffer) => resolve(JSON.parse(data.toString()) as Answer)),
    );
    mine.socket!.send(
      JSON.stringify({ inputs: [{ name: "INPUT", datatype: "INT32", shape: [1, 1], data: [3] }] }),
    );
    assert.deepEqual((await answer).outputs[0]!.data, [8], "the owner's sequence went on from its own state");
    mine.socket!.close();
  });

  test("over a gRPC stream: refused in-band, the owner's sequence exact", async () => {
    const tenantA = new TestClient(server.grpcPort, withMetadata(bearer(A)));
    const tenantB = new TestClient(server.grpcPort, withMetadata(bearer(B)));
    try {
      const answers = async (client: TestClient, requests: object[]) => {
        const stream = client.stream();
        const got: { error_message?: string }[] = [];
        stream.on("data", (m: { error_message?: string }) => got.push(m));
        const done = new Promise<void>((resolve) => stream.on("end", resolve));
        for (const request of requests) stream.write(request);
        stream.end();
        await done;
        return got;
      };
      const [started] = await answers(tenantA, [accumulatorRequest("acc", 5, { id: "s-1", start: true })]);
      assert.equal(int32Output(started as never), 5);
      const [refused] = await answers(tenantB, [accumulatorRequest("acc", 9, { id: "s-1" })]);
      assert.match(errorOf(refused as never), /belongs to another caller/);
      const [ended] = await answers(tenantA, [accumulatorRequest("acc", 1, { id: "s-1", end: true })]);
      assert.equal(int32Output(ended as never), 6);
    } finally {
      tenantA.close();
      tenantB.close();
    }
  });

  test("a SageMaker session, opened and used with the AWS SDK (its key in x-api-key), is the opener's alone", async () => {
    const client = (key: string | undefined) => {
      const sdk = sdkClient(server.server.sagemakerPort!);
      if (key !== undefined) {
        sdk.middlewareStack.add(
          (next) => async (args) => {
            (args.request as { headers: Record<string, string> }).headers["x-api-key"] = key;
            return next(args);
          },
          { step: "build" },
        );
      }
      return sdk;
    };
    const body = (value: number, extra: Record<string, unknown> = {}) =>
      JSON.stringify({
        ...extra,
        inputs: [{ name: "INPUT", datatype: "INT32", shape: [1, 1], data: [value] }],
      });
    const json = { contentType: "application/json", targetModel: "acc" };
    // The access gate's refusal is SageMaker's own; the session's owner check, the container's.
    const keyless = await sdkError(
      invoke(client(undefined), { ...json, body: body(1), sessionId: "NEW_SESSION" }),
    );
    assert.deepEqual([keyless.name, keyless.status], ["ValidationError", 401]);
    assert.match(keyless.message, /API key/);
    const opened = await invoke(client(A), {
      ...json,
      body: body(4, { requestType: "NEW_SESSION" }),
      sessionId: "NEW_SESSION",
    });
    const session = opened.NewSessionId!.split(";")[0]!;
    for (const stranger of [
      invoke(client(B), { ...json, body: body(1), sessionId: session }),
      invoke(client(B), { ...json, body: JSON.stringify({ requestType: "CLOSE" }), sessionId: session }),
    ]) {
      const error = await sdkError(stranger);
      assert.equal(error.originalStatus, 403);
      assert.match(containerMessage(error), /belongs to another caller/);
    }
    const closed = await invoke(client(A), {
      ...json,
      body: body(2, { requestType: "CLOSE" }),
      sessionId: session,
    });
    assert.equal(closed.ClosedSessionId, session);
  });
});

test("no key ever reaches the log, not even refused ones", () => {
  const text = JSON.stringify(lines);
  // The refusals were logged (at debug), so the log did see these requests.
  assert.match(text, /needs an API key/);
  assert.match(text, /the API key is not valid/);
  for (const secret of [A, B, OPS, "not-a-key-at-all-000000"])
    assert.ok(!text.includes(secret), "a key was logged");
});

describe("Triton's --http-restricted-api and --grpc-restricted-protocol", () => {
  let triton: TestServer;
  before(async () => {
    triton = await startTestServer(MODELS, {
      modelControlMode: "explicit",
      loadModels: ["*"],
      security: securityOptions({
        access: {
          ...OPEN_ACCESS,
          httpRestrictions: {
            "model-repository": { header: "admin-key", value: "admin-value" },
            trace: { header: "admin-key", value: "admin-value" },
          },
          grpcRestrictions: {
            "model-repository": { header: "triton-grpc-protocol-admin-key", value: "admin-value" },
            trace: { header: "triton-grpc-protocol-admin-key", value: "admin-value" },
          },
        },
      }),
    });
  });
  after(() => triton.stop());

  test("a restricted API answers only with its header; the others stay open", async () => {
    const index = (headers: Record<string, string>) =>
      fetch(`${triton.url}/v2/repository/index`, { method: "POST", headers });
    const refused = await index({});
    assert.equal(refused.status, 403);
    assert.deepEqual(await refused.json(), { error: "This API is restricted, expecting header 'admin-key'" });
    assert.equal((await index({ "admin-key": "wrong" })).status, 403);
    assert.equal((await index({ "admin-key": "admin-value" })).status, 200);
    assert.equal((await fetch(`${triton.url}/v2/models/floats`)).status, 200);
    for (const path of ["/v2/trace/setting", "/v2/models/floats/trace/setting"]) {
      assert.equal((await fetch(`${triton.url}${path}`)).status, 403, path);
      assert.equal(
        (await fetch(`${triton.url}${path}`, { headers: { "admin-key": "admin-value" } })).status,
        200,
      );
    }

    const anonymous = new TestClient(triton.grpcPort);
    const admin = new TestClient(
      triton.grpcPort,
      withMetadata({ "triton-grpc-protocol-admin-key": "admin-value" }),
    );
    try {
      await assert.rejects(anonymous.unary("RepositoryIndex"), (error: Error & { code: number }) => {
        assert.equal(error.code, 7);
        assert.match(
          error.message,
          /This protocol is restricted, expecting header 'triton-grpc-protocol-admin-key'/,
        );
        return true;
      });
      assert.equal(await grpcCode(admin.unary("RepositoryIndex")), 0);
      assert.equal(await grpcCode(anonymous.unary("TraceSetting")), 7);
      assert.equal(await grpcCode(admin.unary("TraceSetting")), 0);
      assert.equal(await grpcCode(anonymous.unary("ModelMetadata", { name: "floats" })), 0);
    } finally {
      anonymous.close();
      admin.close();
    }
  });
});
