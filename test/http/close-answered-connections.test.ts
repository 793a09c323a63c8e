import assert from "node:assert/strict";
import { Agent, request as httpRequest } from "node:http";
import type { Socket } from "node:net";
import { test } from "node:test";
import { DEFAULT_LIMITS, securityOptions } from "../../src/config/security-options.ts";
import { eventOf, handlerRepository, SLEEPER } from "../handlers/support/handler-kit.ts";
import { startTestServer } from "../support/test-server.ts";

// A request still being answered when the server closes its HTTP endpoints (past the exit
// timeout, or at once in a hand-over to other replicas) is answered, and then its
// kept-alive connection is closed: a program that embeds the server is not held up to the
// keep-alive timeout (--http-keepalive-timeout-secs), which users behind a load balancer
// set to minutes. Here it is ten minutes: without the close the connections would outlast
// the test's timeout.

const config = (eventsFile: string) => `
backend: "typescript"
max_batch_size: 0
input [ { name: "MS" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "MS" data_type: TYPE_INT32 dims: [ 1 ] } ]
instance_group [ { count: 2 kind: KIND_CPU } ]
parameters { key: "events_file" value: { string_value: "${eventsFile}" } }
`;

interface Answer {
  readonly status: number;
  readonly body: string;
  /** Resolves when the server has closed the connection the answer came on. */
  readonly closed: Promise<void>;
}

/** POSTs `body` on a kept-alive connection, which the client would keep open. */
function postKeptAlive(url: string, headers: Record<string, string>, body: string): Promise<Answer> {
  const agent = new Agent({ keepAlive: true, maxSockets: 1 });
  return new Promise((resolve, reject) => {
    const call = httpRequest(url, { method: "POST", agent, headers }, (response) => {
      const socket = response.socket as Socket;
      const closed = new Promise<void>((done) => socket.once("close", () => done()));
      let text = "";
      response.setEncoding("utf8").on("data", (chunk: string) => (text += chunk));
      response.on("end", () => resolve({ status: response.statusCode ?? 0, body: text, closed }));
    });
    call.on("error", reject);
    call.end(body);
  });
}

const MS_BODY = (ms: number) =>
  JSON.stringify({ inputs: [{ name: "MS", datatype: "INT32", shape: [1], data: [ms] }] });

test("a request answered while the server stops has its kept-alive connection closed, not kept to the keep-alive timeout", {
  timeout: 60_000,
}, async (t) => {
  const repository = handlerRepository((eventsFile) => ({
    sleeper: { config: config(eventsFile), files: { "1/model.ts": SLEEPER } },
  }));
  t.after(() => repository.remove());
  const server = await startTestServer(repository.path, {
    sagemakerPort: 0,
    exitTimeoutSecs: 1,
    security: securityOptions({ limits: { ...DEFAULT_LIMITS, httpKeepAliveTimeoutSecs: 600 } }),
  });
  const sagemakerUrl = `http://127.0.0.1:${server.server.sagemakerPort}`;
  const json = { "content-type": "application/json" };
  // One request on each HTTP endpoint, both running in the model past the exit timeout.
  const kserve = postKeptAlive(`${server.url}/v2/models/sleeper/infer`, json, MS_BODY(2500));
  const sagemaker = postKeptAlive(
    `${sagemakerUrl}/invocations`,
    { ...json, "x-amzn-sagemaker-target-model": "sleeper" },
    MS_BODY(2600),
  );
  await eventOf(repository.eventsFile, "the KServe request to run", (event) => event.ms === 2500);
  await eventOf(repository.eventsFile, "the SageMaker request to run", (event) => event.ms === 2600);
  const stopped = server.stop();
  const answers = await Promise.all([kserve, sagemaker]);
  // Past the exit timeout the server stops without them: each is told so.
  for (const answer of answers) assert.equal(answer.status, 503, answer.body);
  await Promise.all(answers.map((answer) => answer.closed));
  await stopped;
});
