import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { parseCommandLine } from "../../src/cli/options.ts";
import { UsageError } from "../../src/cli/usage-error.ts";
import { accumulatorModel } from "../../tools/onnx/sequence-models.ts";
import {
  decoupledCountConfig,
  type HandlerRepository,
  handlerRepository,
} from "../handlers/support/handler-kit.ts";
import { accumulatorConfig } from "../support/sequence-kit.ts";
import { startTestServer, type TestServer } from "../support/test-server.ts";
import { containerMessage, invoke, invokeStream, sdkClient, sdkError } from "./support/sagemaker-kit.ts";

// SAGEMAKER_TRITON_INFERENCE_TYPE=generate|generate_stream: /invocations is Triton's
// generate extension for the model an invocation goes to, answered as the HTTP port's
// /v2/models/{m}/generate and /generate_stream answer it (one flat JSON object; Server-Sent
// Events), as Triton's SageMaker server calls its HTTP server's HandleGenerate.

// Sends COUNT responses, INDEX 0, 1, …, then completes; fails a request of a COUNT below 0.
const COUNTER = `
export default {
  async execute(requests: any[]) {
    for (const r of requests) {
      const count = Number(r.inputs.COUNT.data[0]);
      if (count < 0) {
        r.complete(new Error("asked to fail"));
        continue;
      }
      for (let i = 0; i < count; i++)
        await r.send({ outputs: { INDEX: { datatype: "INT32", shape: [1], data: Int32Array.of(i) } } });
      r.complete();
    }
  },
};
`;

const accumulator = { config: accumulatorConfig("accumulator", 4, "direct { }"), onnx: accumulatorModel() };

async function sagemakerServer(
  models: Parameters<typeof startTestServer>[0],
  inferenceType: "generate" | "generate_stream",
  defaultModel: string,
): Promise<{ server: TestServer; url: string; port: number }> {
  const server = await startTestServer(models, {
    httpPort: undefined,
    grpcPort: undefined,
    metricsPort: undefined,
    sagemakerPort: 0,
    sagemakerModel: defaultModel,
    sagemakerInferenceType: inferenceType,
  });
  const port = server.server.sagemakerPort!;
  return { server, url: `http://127.0.0.1:${port}`, port };
}

describe("SageMaker invocations as Triton's generate", { timeout: 120_000 }, () => {
  let generate: Awaited<ReturnType<typeof sagemakerServer>>;
  before(async () => {
    generate = await sagemakerServer({ accumulator }, "generate", "accumulator");
  });
  after(() => generate?.server.stop());

  it("/invocations takes a generate body (inputs and sequence parameters as members) and answers one flat object", async () => {
    const answer = await fetch(`${generate.url}/invocations`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ INPUT: 5, sequence_id: 41, sequence_start: true }),
    });
    assert.equal(answer.status, 200);
    assert.match(answer.headers.get("content-type") ?? "", /^application\/json/);
    const body = (await answer.json()) as Record<string, unknown>;
    assert.equal(body.model_name, "accumulator");
    assert.equal(body.OUTPUT, 5);
  });

  it("the AWS SDK's InvokeEndpoint gets the same answer on the runtime API's path", async () => {
    const client = sdkClient(generate.port);
    try {
      const output = await invoke(client, {
        body: JSON.stringify({ INPUT: 3, sequence_id: 41, sequence_end: true }),
      });
      const body = JSON.parse(Buffer.from(output.Body!).toString()) as Record<string, unknown>;
      assert.equal(body.OUTPUT, 8);
      // Exactly Triton's type, which the SDK hands over as ContentType.
      assert.equal(output.ContentType, "application/json");
    } finally {
      client.destroy();
    }
  });

  it("InvokeEndpointWithResponseStream gets the answer as the stream's one part", async () => {
    const client = sdkClient(generate.port);
    try {
      const streamed = await invokeStream(client, {
        body: JSON.stringify({ INPUT: 2, sequence_id: 42, sequence_start: true, sequence_end: true }),
      });
      assert.equal(streamed.error, undefined);
      assert.deepEqual(
        streamed.parts.map((part) => (JSON.parse(part.toString()) as Record<string, unknown>).OUTPUT),
        [2],
      );
    } finally {
      client.destroy();
    }
  });

  it("a session header is refused: a generate body carries its sequence in its parameters", async () => {
    const client = sdkClient(generate.port);
    try {
      const error = await sdkError(
        invoke(client, { body: JSON.stringify({ INPUT: 1 }), sessionId: "NEW_SESSION" }),
      );
      assert.match(
        containerMessage(error),
        /SageMaker sessions are not served when invocations are Triton's generate/,
      );
    } finally {
      client.destroy();
    }
  });
});

describe("SageMaker invocations as Triton's generate_stream", { timeout: 120_000 }, () => {
  let repository: HandlerRepository;
  let stream: Awaited<ReturnType<typeof sagemakerServer>>;
  before(async () => {
    repository = handlerRepository({
      counter: { config: decoupledCountConfig(), files: { "1/model.ts": COUNTER } },
    });
    stream = await sagemakerServer(repository.path, "generate_stream", "counter");
  });
  after(async () => {
    await stream?.server.stop();
    repository?.remove();
  });

  it("/invocations answers Server-Sent Events, one data event per response of a decoupled model", async () => {
    const answer = await fetch(`${stream.url}/invocations`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ COUNT: 3 }),
    });
    assert.equal(answer.status, 200);
    assert.match(answer.headers.get("content-type") ?? "", /^text\/event-stream/);
    const events = (await answer.text())
      .split("\n\n")
      .filter((event) => event !== "")
      .map((event) => JSON.parse(event.replace(/^data: /, "")) as Record<string, unknown>);
    assert.deepEqual(
      events.map((event) => [event.model_name, event.INDEX]),
      [
        ["counter", 0],
        ["counter", 1],
        ["counter", 2],
      ],
    );
  });

  it("InvokeEndpointWithResponseStream gets each event as a part, as SageMaker hands the container's stream over", async () => {
    const client = sdkClient(stream.port);
    try {
      const streamed = await invokeStream(client, { body: JSON.stringify({ COUNT: 3 }) });
      assert.equal(streamed.error, undefined);
      assert.equal(streamed.contentType, "text/event-stream");
      assert.deepEqual(
        streamed.parts.map(
          (part) => (JSON.parse(part.toString().replace(/^data: /, "")) as { INDEX: number }).INDEX,
        ),
        [0, 1, 2],
      );
    } finally {
      client.destroy();
    }
  });

  it("a request its model failed before its first response: /invocations answers it as generate_stream, its status and its event", async () => {
    const answer = await fetch(`${stream.url}/invocations`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ COUNT: -1 }),
    });
    assert.equal(answer.status, 500);
    assert.match(answer.headers.get("content-type") ?? "", /^text\/event-stream/);
    assert.equal(await answer.text(), 'data: {"error":"asked to fail"}\n\n');
  });

  it("a request its model failed before its first response: the runtime API's paths answer a ModelError, as SageMaker makes of a container's error status", async () => {
    const client = sdkClient(stream.port);
    try {
      for (const call of [invoke, invokeStream]) {
        const error = await sdkError(call(client, { body: JSON.stringify({ COUNT: -1 }) }));
        assert.equal(containerMessage(error), "asked to fail");
        assert.equal(error.originalStatus, 500);
      }
    } finally {
      client.destroy();
    }
  });
});

describe("SAGEMAKER_TRITON_INFERENCE_TYPE at start", () => {
  const argv = ["--model-repository", ".", "--allow-sagemaker", "true"];
  it("names what /invocations is; --sagemaker-inference-type wins over it", () => {
    const read = (env: Record<string, string>, flags: string[] = []) => {
      const command = parseCommandLine([...argv, ...flags], env);
      assert.equal(command.kind, "serve");
      return command.kind === "serve" ? command.options.sagemakerInferenceType : undefined;
    };
    assert.equal(read({}), "infer");
    assert.equal(read({ SAGEMAKER_TRITON_INFERENCE_TYPE: "generate_stream" }), "generate_stream");
    assert.equal(
      read({ SAGEMAKER_TRITON_INFERENCE_TYPE: "generate_stream" }, [
        "--sagemaker-inference-type",
        "generate",
      ]),
      "generate",
    );
  });

  it("another value is refused with Triton's words", () => {
    assert.throws(
      () => parseCommandLine(argv, { SAGEMAKER_TRITON_INFERENCE_TYPE: "chat" }),
      (error: unknown) =>
        error instanceof UsageError &&
        error.message ===
          "Invalid SAGEMAKER_TRITON_INFERENCE_TYPE 'chat'. Must be one of: infer, generate, generate_stream",
    );
  });
});
