import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { after, before, describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import { pythonClient } from "../support/python-client.ts";
import { startTestServer, type TestServer } from "../support/test-server.ts";

// The README's client examples (examples/clients) run as written against a server of
// examples/models, and print the running sums the server keeps. The boto3 example runs
// with the tests' Python (test/support/python-client.ts); without one it is skipped, and
// says why.

const ROOT = fileURLToPath(new URL("../..", import.meta.url));

function runExample(
  script: string,
  address: string,
  command: readonly string[] = [process.execPath, "--import", "tsx"],
): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const child = spawn(command[0]!, [...command.slice(1), script, address], { cwd: ROOT });
  let stdout = "";
  let stderr = "";
  child.stdout.on("data", (chunk: Buffer) => {
    stdout += chunk.toString();
  });
  child.stderr.on("data", (chunk: Buffer) => {
    stderr += chunk.toString();
  });
  return new Promise((resolve) => child.on("close", (code) => resolve({ code, stdout, stderr })));
}

const SUMS = [5, 8, 18, 20, 27].map((sum) => `running sum: ${sum}`);

let server: TestServer;
before(async () => {
  server = await startTestServer(fileURLToPath(new URL("../../examples/models", import.meta.url)), {
    sagemakerPort: 0,
  });
});
after(() => server.stop());

describe("example clients", { timeout: 60_000 }, () => {
  it("grpc-sequence-stream.ts streams a sequence over ModelStreamInfer", async () => {
    const run = await runExample("examples/clients/grpc-sequence-stream.ts", `127.0.0.1:${server.grpcPort}`);
    assert.equal(run.code, 0, run.stderr);
    assert.deepEqual(run.stdout.trim().split("\n"), SUMS);
  });

  it("http-sequence-retry.ts numbers its steps and names the sequence in X-Sequence-Id", async () => {
    const run = await runExample(
      "examples/clients/http-sequence-retry.ts",
      `127.0.0.1:${new URL(server.url).port}`,
    );
    assert.equal(run.code, 0, run.stderr);
    assert.deepEqual(run.stdout.trim().split("\n"), SUMS);
  });

  it("websocket-sequence.ts streams a sequence over a WebSocket and the server closes with 1000", async () => {
    const port = new URL(server.url).port;
    const run = await runExample("examples/clients/websocket-sequence.ts", `127.0.0.1:${port}`);
    assert.equal(run.code, 0, run.stderr);
    const lines = run.stdout.trim().split("\n");
    assert.match(lines[0]!, /^sequence id: \d+$/);
    assert.deepEqual(lines.slice(1), [...SUMS, "closed: 1000"]);
  });

  it("sagemaker-session.ts runs a SageMaker session with the AWS SDK for JavaScript", async () => {
    const run = await runExample(
      "examples/clients/sagemaker-session.ts",
      `127.0.0.1:${server.server.sagemakerPort}`,
    );
    assert.equal(run.code, 0, run.stderr);
    assert.deepEqual(run.stdout.trim().split("\n"), [...SUMS, "closed: true"]);
  });

  const python = pythonClient("boto3");
  const noBoto3 = "reason" in python ? python.reason : false;
  if (noBoto3) process.stdout.write(`# skipping the boto3 example: ${noBoto3}\n`);
  it("sagemaker_session.py runs a SageMaker session with boto3, as AWS documents it", {
    skip: noBoto3,
  }, async () => {
    const run = await runExample(
      "examples/clients/sagemaker_session.py",
      `127.0.0.1:${server.server.sagemakerPort}`,
      ["python" in python ? python.python : "python3"],
    );
    assert.equal(run.code, 0, run.stderr);
    const lines = run.stdout.trim().split("\n");
    assert.match(lines[0]!, /^session expires: \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$/);
    assert.deepEqual(lines.slice(1), [...SUMS, "closed: True"]);
  });
});
