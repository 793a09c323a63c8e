import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { pino } from "pino";
import { addSubModel } from "../../tools/onnx/test-models.ts";
import { getJson, postJson } from "../support/http-client.ts";
import { startTestServer, type TestServer } from "../support/test-server.ts";
import { type HandlerRepository, handlerRepository } from "./support/handler-kit.ts";

// context.infer: a handler's calls go through the called model's scheduler, so they are
// batched with the rest of its traffic (here one call at a time from the handler and one
// request at a time from an outside client: every batch larger than 1 mixes the two);
// a refusal comes back as an error with its status class, and a call that gets no answer
// fails after handler_call_timeout_ms instead of hanging; a call that cannot be sent fails
// with a message naming what could not be.

const RELAY = `
export default {
  async execute(requests: any[], context: any) {
    const results = [];
    for (const request of requests) {
      const target = new TextDecoder().decode(request.inputs.TARGET.data[0]);
      // "addsub+function" calls addsub with a parameter postMessage cannot copy;
      // "addsub+signal" with the request's signal (its client may leave).
      const [model, odd] = target.split("+");
      try {
        if (odd === "signal") context.log.info("calling", { model });
        const answer = await context.infer(model, {
          inputs: { INPUT0: request.inputs.X, INPUT1: request.inputs.X },
          outputs: ["OUTPUT0"],
          ...(odd === "function" ? { parameters: { f: () => 1 } } : {}),
          ...(odd === "signal" ? { signal: request.signal } : {}),
        });
        results.push({ outputs: { Y: { ...answer.outputs.OUTPUT0, shape: [1, 4] } }, parameters: { called: answer.modelName } });
      } catch (error) {
        if (odd === "signal") context.log.info("call failed", { code: error.code, reason: error.message });
        results.push(error);
      }
    }
    return results;
  },
};
`;

// Calls itself with N - 1 while N > 0: with one instance, the inner call waits for the
// instance the outer request holds.
const SELFISH = `
export default {
  async execute(requests: any[], context: any) {
    const results = [];
    for (const request of requests) {
      const n = request.inputs.N.data[0];
      try {
        if (n > 0) await context.infer("selfish", { inputs: { N: { datatype: "INT32", shape: [1], data: Int32Array.of(n - 1) } } });
        results.push({ outputs: { N: request.inputs.N } });
      } catch (error) {
        results.push(error);
      }
    }
    return results;
  },
};
`;

const SLEEPY = `
export default {
  execute() {
    return new Promise(() => {});
  },
};
`;

const relayConfig = (extra = "") => `
backend: "typescript"
max_batch_size: 8
input [ { name: "X" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "TARGET" data_type: TYPE_STRING dims: [ 1 ] } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ 4 ] } ]
${extra}
`;

let repository: HandlerRepository;
let server: TestServer;
const logLines: string[] = [];

before(async () => {
  repository = handlerRepository({
    addsub: {
      config: `
backend: "onnxruntime"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 4 ] } ]
dynamic_batching { preferred_batch_size: [ 2 ] max_queue_delay_microseconds: 2000000 }
`,
      files: { "1/model.onnx": addSubModel("FP32", [-1, 4]) },
    },
    relay: {
      config: relayConfig('parameters { key: "handler_call_timeout_ms" value { string_value: "300" } }'),
      files: { "1/model.ts": RELAY },
    },
    // The same, with the default call timeout: a call ends only when it is answered or cancelled.
    patient_relay: { config: relayConfig(), files: { "1/model.ts": RELAY } },
    selfish: {
      config: `
backend: "typescript"
max_batch_size: 0
input [ { name: "N" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "N" data_type: TYPE_INT32 dims: [ 1 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
parameters { key: "handler_call_timeout_ms" value { string_value: "300" } }
`,
      files: { "1/model.ts": SELFISH },
    },
    sleepy: {
      config: `
backend: "typescript"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
parameters { key: "handler_timeout_ms" value { string_value: "5000" } }
`,
      files: { "1/model.ts": SLEEPY },
    },
  });
  const logger = pino({ level: "info" }, { write: (line: string) => logLines.push(line) });
  server = await startTestServer(repository.path, {}, logger);
});

after(async () => {
  await server.stop();
  repository.remove();
});

const x = (v: number) => ({ name: "X", datatype: "FP32", shape: [1, 4], data: [v, v + 1, v + 2, v + 3] });
const target = (name: string) => ({ name: "TARGET", datatype: "BYTES", shape: [1, 1], data: [name] });

test("calls from a handler are batched with the called model's other traffic", async () => {
  const rounds = 8;
  const viaHandler = (async () => {
    const answers = [];
    for (let i = 0; i < rounds; i++) {
      answers.push(
        await postJson(`${server.url}/v2/models/relay/infer`, { inputs: [x(i), target("addsub")] }),
      );
    }
    return answers;
  })();
  const direct = (async () => {
    for (let i = 0; i < rounds; i++) {
      const answer = await postJson(`${server.url}/v2/models/addsub/infer`, {
        inputs: [
          { name: "INPUT0", datatype: "FP32", shape: [1, 4], data: [i, i, i, i] },
          { name: "INPUT1", datatype: "FP32", shape: [1, 4], data: [1, 1, 1, 1] },
        ],
      });
      assert.equal(answer.status, 200);
    }
  })();
  const [answers] = await Promise.all([viaHandler, direct]);
  answers.forEach((answer, i) => {
    assert.equal(answer.status, 200, JSON.stringify(answer.body));
    const y = (answer.body.outputs as { data: number[] }[])[0]!.data;
    assert.deepEqual(y, [2 * i, 2 * i + 2, 2 * i + 4, 2 * i + 6]);
    assert.deepEqual(answer.body.parameters, { called: "addsub" });
  });
  const stats = await getJson(`${server.url}/v2/models/addsub/stats`);
  const batches = (stats.body.model_stats as { batch_stats: { batch_size: number }[] }[])[0]!.batch_stats;
  const largest = Math.max(...batches.map((b) => b.batch_size));
  assert.ok(largest > 1, `batch sizes seen: ${JSON.stringify(batches.map((b) => b.batch_size))}`);
});

test("a call the server refuses comes back as an error with its status class", async () => {
  const unknown = await postJson(`${server.url}/v2/models/relay/infer`, { inputs: [x(1), target("nope")] });
  assert.equal(unknown.status, 404);
  assert.match(unknown.body.error as string, /nope/);
});

test("a call with a parameter that cannot be sent fails with a message naming it, and calls go on", async () => {
  const odd = await postJson(`${server.url}/v2/models/relay/infer`, {
    inputs: [x(1), target("addsub+function")],
  });
  // The call's error carries its code (INVALID_ARG), as a call the other model refuses does.
  assert.equal(odd.status, 400, JSON.stringify(odd.body));
  assert.equal(
    odd.body.error,
    "parameter 'f' of the call to 'addsub' is a function: parameters are strings, numbers, bigints or booleans",
  );
  // The worker goes on calling (addsub waits for a batch of two, so an unknown model's refusal shows it).
  const next = await postJson(`${server.url}/v2/models/relay/infer`, { inputs: [x(1), target("nope")] });
  assert.equal(next.status, 404, JSON.stringify(next.body));
});

test("a call that gets no answer fails after handler_call_timeout_ms", async () => {
  const stuck = await postJson(`${server.url}/v2/models/relay/infer`, { inputs: [x(1), target("sleepy")] });
  assert.equal(stuck.status, 503, JSON.stringify(stuck.body));
  assert.match(
    stuck.body.error as string,
    /the call from model 'relay' to model 'sleepy' got no answer within 300 ms \(handler_call_timeout_ms\)/,
  );
});

test("a call given the request's signal is cancelled when the client leaves: the other model drops it unrun", async () => {
  const stats = async () =>
    (
      (await getJson(`${server.url}/v2/models/addsub/stats`)).body.model_stats as {
        inference_count: number;
        execution_count: number;
      }[]
    )[0]!;
  const before = await stats();
  const logged = async (text: string) => {
    for (let tries = 0; tries < 500; tries++) {
      const line = logLines.find((l) => l.includes(text));
      if (line !== undefined) return JSON.parse(line) as Record<string, unknown>;
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
    assert.fail(`no log line with ${text}`);
  };
  const client = new AbortController();
  const leaving = fetch(`${server.url}/v2/models/patient_relay/infer`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ inputs: [x(1), target("addsub+signal")] }),
    signal: client.signal,
  }).catch(() => undefined);
  // The call waits in addsub's queue for a second request to make its batch of two.
  await logged('"msg":"calling"');
  client.abort();
  await leaving;
  const failed = await logged('"msg":"call failed"');
  assert.equal(failed.code, "CANCELLED");
  assert.match(
    String(failed.reason),
    /^the call to 'addsub' was cancelled: a request cancelled: the client went away$/,
  );
  // Had the call stayed queued, this request would have made a batch of two with it.
  const alone = await postJson(`${server.url}/v2/models/addsub/infer`, {
    inputs: [
      { name: "INPUT0", datatype: "FP32", shape: [1, 4], data: [1, 2, 3, 4] },
      { name: "INPUT1", datatype: "FP32", shape: [1, 4], data: [1, 2, 3, 4] },
    ],
  });
  assert.equal(alone.status, 200, JSON.stringify(alone.body));
  const after = await stats();
  assert.deepEqual(
    [after.inference_count - before.inference_count, after.execution_count - before.execution_count],
    [1, 1],
  );
});

test("a call to the caller's own model that gets no answer says why it may wait", async () => {
  const answer = await postJson(`${server.url}/v2/models/selfish/infer`, {
    inputs: [{ name: "N", datatype: "INT32", shape: [1], data: [1] }],
  });
  assert.equal(answer.status, 503, JSON.stringify(answer.body));
  assert.equal(
    answer.body.error,
    "the call from model 'selfish' to model 'selfish' got no answer within 300 ms (handler_call_timeout_ms); a call to the caller's own model needs an instance the calling request is not holding",
  );
});
