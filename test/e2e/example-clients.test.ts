import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { after, before, describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import { startTestServer, type TestServer } from "../support/test-server.ts";

// The README's client examples (examples/clients) run as written against a server of
// examples/models, and print the running sums the server keeps.

const ROOT = fileURLToPath(new URL("../..", import.meta.url));

function runExample(
  script: string,
  address: string,
): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const child = spawn(process.execPath, ["--import", "tsx", script, address], { cwd: ROOT });
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
  server = await startTestServer(fileURLToPath(new URL("../../examples/models", import.meta.url)));
});
after(() => server.stop());

describe("example clients", { timeout: 60_000 }, () => {
  it("grpc-sequence-stream.ts streams a sequence over ModelStreamInfer", async () => {
    const run = await runExample("examples/clients/grpc-sequence-stream.ts", `127.0.0.1:${server.grpcPort}`);
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
});
