import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, renameSync, rmSync } from "node:fs";
import { createServer as createHttpServer, type Server } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { Client, credentials, type ServiceError } from "@grpc/grpc-js";
import type { MethodDefinition } from "@grpc/proto-loader";
import { INFERENCE_SERVICE_NAME, packageDefinition } from "../../src/frontends/grpc/proto-definitions.ts";
import { accumulatorModel } from "../../tools/onnx/sequence-models.ts";
import { addSubModel } from "../../tools/onnx/test-models.ts";
import { getJson, infer, outputData } from "../support/http-client.ts";
import { type TempRepository, tempRepository } from "../support/model-repository.ts";
import { BIN, FREE_PORT_FLAGS, freePort, run, ServerProcess } from "../support/seqserve-process.ts";
import { accumulatorConfig, int32Input } from "../support/sequence-kit.ts";
import { rowsOf, simpleConfig, simpleInputs, sum, waitUntil } from "./support/serving.ts";

// A Triton launch script, run unchanged by the seqserve command: Triton's flags and values
// (log file and format, per-endpoint addresses, --id, metrics and trace settings, GPU flags
// that have no effect here), --exit-on-error both ways, --strict-readiness, gRPC over TLS,
// and traces sent to an OTLP/HTTP receiver.

const MODELS = {
  simple: { config: simpleConfig("simple"), onnx: addSubModel("INT32", [-1, 16]) },
  acc: { config: accumulatorConfig("acc", 4, "direct { }"), onnx: accumulatorModel() },
};
const CORRUPT = { onnx: new TextEncoder().encode("this is not an ONNX model") };

/** An OTLP/HTTP receiver on loopback: the JSON bodies it was sent. */
async function otlpReceiver(): Promise<{ server: Server; port: number; bodies: Record<string, unknown>[] }> {
  const bodies: Record<string, unknown>[] = [];
  const server = createHttpServer((request, response) => {
    const parts: Buffer[] = [];
    request.on("data", (part: Buffer) => parts.push(part));
    request.on("end", () => {
      if (request.url === "/v1/traces")
        bodies.push(JSON.parse(Buffer.concat(parts).toString()) as Record<string, unknown>);
      response.writeHead(200, { "content-type": "application/json" }).end("{}");
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const address = server.address();
  return { server, port: typeof address === "object" && address !== null ? address.port : 0, bodies };
}

interface OtlpSpan {
  readonly name: string;
  readonly traceId: string;
  readonly attributes: { key: string; value: { stringValue?: string; intValue?: string | number } }[];
}

function otlpSpans(
  bodies: readonly Record<string, unknown>[],
): { service: string | undefined; span: OtlpSpan }[] {
  const found: { service: string | undefined; span: OtlpSpan }[] = [];
  for (const body of bodies) {
    for (const resourceSpans of body.resourceSpans as {
      resource: { attributes: OtlpSpan["attributes"] };
      scopeSpans: { spans: OtlpSpan[] }[];
    }[]) {
      const service = resourceSpans.resource.attributes.find((a) => a.key === "service.name")?.value
        .stringValue;
      for (const scope of resourceSpans.scopeSpans)
        for (const span of scope.spans) found.push({ service, span });
    }
  }
  return found;
}

describe("a Triton launch script", { timeout: 180_000 }, () => {
  let repository: TempRepository;
  let logs: string;
  let server: ServerProcess;
  let receiver: Awaited<ReturnType<typeof otlpReceiver>>;
  let ports: { http: number; grpc: number; metrics: number };
  let url: string;

  before(async () => {
    repository = tempRepository(MODELS);
    logs = mkdtempSync(join(tmpdir(), "seqserve-logs-"));
    receiver = await otlpReceiver();
    ports = { http: await freePort(), grpc: await freePort(), metrics: await freePort() };
    url = `http://127.0.0.1:${ports.http}`;
    server = new ServerProcess(process.execPath, [
      BIN,
      `--model-repository=${repository.path}`,
      "--id=edge-server",
      "--exit-on-error=true",
      "--strict-readiness=true",
      "--disable-auto-complete-config",
      "--model-control-mode=none",
      "--model-load-thread-count=2",
      "--backend-config=onnxruntime,default-max-batch-size=8",
      `--http-address=127.0.0.1`,
      `--http-port=${ports.http}`,
      "--http-thread-count=8",
      `--grpc-address=127.0.0.1`,
      `--grpc-port=${ports.grpc}`,
      "--grpc-infer-response-compression-level=none",
      `--metrics-port=${ports.metrics}`,
      "--allow-gpu-metrics=true",
      "--allow-cpu-metrics=true",
      "--metrics-interval-ms=200",
      "--metrics-config=summary_latencies=true",
      "--pinned-memory-pool-byte-size=268435456",
      "--cuda-memory-pool-byte-size=0:67108864",
      "--log-verbose=0",
      "--log-info=true",
      "--log-format=ISO8601",
      `--log-file=${join(logs, "server.log")}`,
      "--trace-config=mode=opentelemetry",
      "--trace-config=level=TIMESTAMPS",
      "--trace-config=rate=1",
      `--trace-config=opentelemetry,url=127.0.0.1:${receiver.port}/v1/traces`,
      "--trace-config=opentelemetry,resource=service.name=edge-traces",
      "--trace-config=opentelemetry,bsp_schedule_delay=50",
      "--exit-timeout-secs=5",
    ]);
    // Its log goes to the file: no listening line comes on standard output.
    server.listening.catch(() => {});
    await waitUntil(
      "the server ready",
      async () => (await fetch(`${url}/v2/health/ready`).catch(() => undefined))?.status === 200,
      60_000,
    );
  });
  after(async () => {
    await server?.stop();
    receiver?.server.close();
    repository?.remove();
    rmSync(logs, { recursive: true, force: true });
  });

  it("serves on the addresses and ports it names, as the server it names", async () => {
    assert.equal((await getJson(`${url}/v2`)).body.name, "edge-server");
    const a = rowsOf(4);
    assert.deepEqual(outputData(await infer(url, "simple", simpleInputs(a, a)), "OUTPUT0"), sum(a, a));
    assert.deepEqual(
      outputData(await infer(url, "acc", int32Input(5), { id: 3, start: true }), "OUTPUT"),
      [5],
    );
    const metrics = await (await fetch(`http://127.0.0.1:${ports.metrics}/metrics`)).text();
    assert.match(metrics, /^nv_inference_request_summary_us_count\{model="simple",version="1"\} 1$/m);
    assert.match(metrics, /^nv_cpu_utilization /m);
  });

  it("sends each request's spans to the OTLP receiver it names, with its resource", async () => {
    await waitUntil(
      "spans at the receiver",
      async () => otlpSpans(receiver.bodies).filter((s) => s.span.name === "InferRequest").length >= 2,
      30_000,
    );
    const spans = otlpSpans(receiver.bodies);
    assert.ok(spans.every((s) => s.service === "edge-traces"));
    const sequence = spans.find(
      (s) =>
        s.span.name === "InferRequest" &&
        s.span.attributes.some((a) => a.key === "triton.model_name" && a.value.stringValue === "acc"),
    )!;
    assert.equal(
      sequence.span.attributes.find((a) => a.key === "seqserve.sequence_id")?.value.stringValue,
      "3",
    );
    const names = new Set(
      spans.filter((s) => s.span.traceId === sequence.span.traceId).map((s) => s.span.name),
    );
    assert.deepEqual([...names].sort(), ["InferRequest", "batch", "compute", "queue"]);
  });

  it("logs to its --log-file in ISO 8601, with one line for each flag that has no effect here", async () => {
    const text = readFileSync(join(logs, "server.log"), "utf8");
    // Each endpoint with the address it is bound to (the server's --host is 0.0.0.0).
    const listening = `listening: HTTP 127.0.0.1:${ports.http}, gRPC 127.0.0.1:${ports.grpc}, metrics 127.0.0.1:${ports.metrics}, SageMaker off`;
    assert.match(text, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ I \d+ seqserve:0\] "seqserve [\d.]+ listening: /m);
    assert.ok(
      text.includes(listening),
      text.split("\n").find((l) => l.includes("listening")),
    );
    for (const flag of [
      "--allow-gpu-metrics=true",
      "--pinned-memory-pool-byte-size",
      "--http-thread-count",
    ]) {
      const lines = text
        .split("\n")
        .filter((line) => line.includes(`${flag}`) && line.includes("has no effect"));
      assert.equal(lines.length, 1, flag);
    }
    assert.equal(server.lines.length + server.notJson.length, 0, "nothing on standard output");
  });

  it("reopens its --log-file on SIGHUP, as logrotate's rename and postrotate need, and goes on serving", async () => {
    const file = join(logs, "server.log");
    renameSync(file, join(logs, "server.log.1"));
    server.child.kill("SIGHUP");
    await waitUntil(
      "the log file reopened",
      async () => existsSync(file) && readFileSync(file, "utf8").includes("the log file was reopened"),
      10_000,
    );
    assert.equal((await fetch(`${url}/v2/health/ready`)).status, 200);
    assert.ok(!readFileSync(join(logs, "server.log.1"), "utf8").includes("reopened"));
  });

  it("stops cleanly on SIGTERM", async () => {
    const exit = await server.stop();
    assert.equal(exit.code, 0, exit.stderr);
  });
});

describe("--exit-on-error and --strict-readiness", { timeout: 180_000 }, () => {
  let repository: TempRepository;
  before(() => {
    repository = tempRepository({ simple: MODELS.simple, corrupt: CORRUPT });
  });
  after(() => repository?.remove());

  it("by default (true, as Triton) a model that fails to load stops the start: exit code 1, the model named", async () => {
    const exit = await run(["--model-repository", repository.path, ...FREE_PORT_FLAGS]);
    assert.equal(exit.code, 1);
    assert.match(
      exit.stderr,
      /^seqserve: failed to start: model 'corrupt' failed to load: .*Protobuf parsing failed/m,
    );
  });

  for (const strict of [true, false]) {
    it(`--exit-on-error=false serves the others; --strict-readiness=${strict}: ready ${strict ? "400" : "200"}`, async () => {
      const started = new ServerProcess(process.execPath, [
        BIN,
        "--model-repository",
        repository.path,
        ...FREE_PORT_FLAGS,
        "--exit-on-error=false",
        `--strict-readiness=${strict}`,
      ]);
      try {
        const url = `http://127.0.0.1:${(await started.listening).http_port}`;
        assert.equal((await fetch(`${url}/v2/health/ready`)).status, strict ? 400 : 200);
        assert.equal((await fetch(`${url}/v2/models/simple/ready`)).status, 200);
        assert.equal((await fetch(`${url}/v2/models/corrupt/ready`)).status, 400);
      } finally {
        assert.equal((await started.stop()).code, 0);
      }
    });
  }
});

/** A self-signed certificate for 127.0.0.1, or why none could be made. */
function selfSigned(dir: string): { cert: string; key: string } | { skip: string } {
  const cert = join(dir, "cert.pem");
  const key = join(dir, "key.pem");
  try {
    execFileSync(
      "openssl",
      ["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", cert, "-days", "1"].concat([
        "-subj",
        "/CN=127.0.0.1",
        "-addext",
        "subjectAltName=IP:127.0.0.1",
      ]),
      { stdio: "pipe", timeout: 30_000 },
    );
    return { cert, key };
  } catch (error) {
    return { skip: `openssl could not make a test certificate: ${(error as Error).message.split("\n")[0]}` };
  }
}

describe("--grpc-use-ssl", { timeout: 120_000 }, () => {
  const dir = mkdtempSync(join(tmpdir(), "seqserve-tls-"));
  const pair = selfSigned(dir);
  after(() => rmSync(dir, { recursive: true, force: true }));

  it("serves gRPC over TLS with the certificate and key given; a plaintext client is turned away", {
    skip: "skip" in pair ? pair.skip : false,
  }, async () => {
    const { cert, key } = pair as { cert: string; key: string };
    assert.ok(existsSync(cert));
    const repository = tempRepository({ simple: MODELS.simple });
    const started = new ServerProcess(process.execPath, [
      BIN,
      "--model-repository",
      repository.path,
      ...FREE_PORT_FLAGS,
      "--grpc-use-ssl=true",
      `--grpc-server-cert=${cert}`,
      `--grpc-server-key=${key}`,
    ]);
    try {
      const port = (await started.listening).grpc_port!;
      const live = (client: Client): Promise<{ live: boolean }> => {
        const method = (
          packageDefinition()[INFERENCE_SERVICE_NAME] as Record<string, MethodDefinition<object, object>>
        ).ServerLive!;
        return new Promise((resolve, reject) => {
          client.makeUnaryRequest(
            method.path,
            method.requestSerialize,
            method.responseDeserialize,
            {},
            { deadline: Date.now() + 10_000 },
            (error: ServiceError | null, value?: object) =>
              error ? reject(error) : resolve(value as { live: boolean }),
          );
        });
      };
      const secure = new Client(`127.0.0.1:${port}`, credentials.createSsl(readFileSync(cert)));
      const plain = new Client(`127.0.0.1:${port}`, credentials.createInsecure());
      try {
        assert.deepEqual(await live(secure), { live: true });
        await assert.rejects(live(plain));
      } finally {
        secure.close();
        plain.close();
      }
    } finally {
      assert.equal((await started.stop()).code, 0);
      repository.remove();
    }
  });
});
