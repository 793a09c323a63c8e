import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { getJson, postJson } from "../support/http-client.ts";
import { metricValue } from "../support/sequence-kit.ts";
import { startTestServer, type TestServer } from "../support/test-server.ts";
import { eventOf, type HandlerRepository, handlerRepository, RECORDER } from "./support/handler-kit.ts";

// What the statistics and metrics say of model code, measured against a workload whose
// every request is known, as Triton defines each figure: a batch counts its rows and only
// when some request of it succeeded; each request carries its batch's compute (input, infer,
// output) times; a request refused before the scheduler took it is no failure; the pending gauge
// counts the requests waiting for an instance, not the one running.

const DOUBLER = `
export default {
  execute(requests: any[]) {
    return requests.map((r) => {
      const values = r.inputs.VALUE.data as Int32Array;
      if (values[0]! < 0) return new Error("negative values are refused by the model");
      return { outputs: { OUT: { datatype: "INT32", shape: r.inputs.VALUE.shape, data: values.map((v) => v * 2) } } };
    });
  },
};
`;

const SLOW_STEPS = `${RECORDER}
export default {
  initialize(context: any) {
    eventsFile = context.model.parameters.events_file;
  },
  async execute(requests: any[]) {
    const out = [];
    for (const r of requests) {
      const value = Number(r.inputs.VALUE.data[0]);
      record({ hook: "execute", value });
      if (value >= 1000) await new Promise((resolve) => setTimeout(resolve, value));
      out.push({ outputs: { OUT: { datatype: "INT32", shape: [1, 1], data: Int32Array.of(value) } } });
    }
    return out;
  },
};
`;

// Answers its batch X ms (the first request's VALUE) after execute() was called, by returning.
const SLOW = `
export default {
  async execute(requests: any[]) {
    await new Promise((resolve) => setTimeout(resolve, Number(requests[0].inputs.VALUE.data[0])));
    return requests.map((r) => ({ outputs: { OUT: r.inputs.VALUE } }));
  },
};
`;

// Decoupled: execute() returns at once, and each request is answered and completed X ms later.
const LATER = `
export default {
  execute(requests: any[]) {
    for (const r of requests)
      setTimeout(async () => {
        await r.send({ outputs: { OUT: r.inputs.VALUE } });
        r.complete();
      }, Number(r.inputs.VALUE.data[0]));
  },
};
`;

const io = `
input [ { name: "VALUE" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
`;

let repository: HandlerRepository;
let server: TestServer;
before(async () => {
  repository = handlerRepository((eventsFile) => ({
    doubler: { config: `backend: "typescript"\nmax_batch_size: 8\n${io}`, files: { "1/model.ts": DOUBLER } },
    slow: {
      config: `backend: "typescript"\nmax_batch_size: 4\ndynamic_batching { }\n${io}`,
      files: { "1/model.ts": SLOW },
    },
    later: {
      config: `backend: "typescript"\nmax_batch_size: 0\nmodel_transaction_policy { decoupled: true }\n${io}`,
      files: { "1/model.ts": LATER },
    },
    steps: {
      config: `backend: "typescript"\nmax_batch_size: 1\n${io}
sequence_batching { max_sequence_idle_microseconds: 60000000 direct { } }
instance_group [ { count: 1 kind: KIND_CPU } ]
parameters { key: "events_file" value: { string_value: "${eventsFile}" } }`,
      files: { "1/model.ts": SLOW_STEPS },
    },
  }));
  server = await startTestServer(repository.path);
});
after(async () => {
  await server?.stop();
  repository?.remove();
});

interface Duration {
  count: number;
  ns: number;
}
interface ModelStats {
  execution_count: number;
  inference_stats: Record<
    "success" | "fail" | "compute_input" | "compute_infer" | "compute_output",
    Duration
  >;
  batch_stats: ({ batch_size: number } & Record<
    "compute_input" | "compute_infer" | "compute_output",
    Duration
  >)[];
}

const statsOf = async (model: string): Promise<ModelStats> =>
  ((await getJson(`${server.url}/v2/models/${model}/stats`)).body.model_stats as ModelStats[])[0]!;

const infer = (model: string, data: number[], parameters: Record<string, unknown> = {}) =>
  postJson(`${server.url}/v2/models/${model}/infer`, {
    parameters,
    inputs: [{ name: "VALUE", datatype: "INT32", shape: [data.length, 1], data }],
  });

describe("model code's statistics and metrics", () => {
  it("a request of 2 rows is a batch of 2; a batch whose every request failed is no execution; each request has its batch's input and output times", async () => {
    const answered = await infer("doubler", [3, 4]);
    assert.equal(answered.status, 200, JSON.stringify(answered.body));
    let stats = await statsOf("doubler");
    assert.equal(stats.execution_count, 1);
    assert.deepEqual(
      stats.batch_stats.map((b) => [b.batch_size, b.compute_infer.count]),
      [[2, 1]],
    );
    assert.ok(stats.inference_stats.compute_input.ns > 0, JSON.stringify(stats.inference_stats));
    assert.ok(stats.inference_stats.compute_output.ns > 0, JSON.stringify(stats.inference_stats));

    const failed = await infer("doubler", [-1]);
    assert.equal(failed.status, 500, JSON.stringify(failed.body));
    stats = await statsOf("doubler");
    assert.equal(stats.execution_count, 1);
    assert.equal(stats.inference_stats.fail.count, 1);
    assert.equal(await metricValue(server.metricsUrl, "nv_inference_exec_count", { model: "doubler" }), 1);
  });

  it("batches of one report per request the compute times they report per batch, as Triton's backends report both from one run's timestamps", async () => {
    // One at a time: every batch is of one request.
    for (let i = 0; i < 5; i++) {
      const answered = await infer("slow", [5]);
      assert.equal(answered.status, 200, JSON.stringify(answered.body));
      // Decoupled, completed after its execute() returned: it reports its batch's run.
      const generated = await postJson(`${server.url}/v2/models/later/generate`, { VALUE: 5 });
      assert.equal(generated.status, 200, JSON.stringify(generated.body));
    }
    for (const model of ["slow", "later"]) {
      const stats = await statsOf(model);
      assert.deepEqual(
        stats.batch_stats.map((b) => b.batch_size),
        [1],
        model,
      );
      const batch = stats.batch_stats[0]!;
      for (const phase of ["compute_input", "compute_infer", "compute_output"] as const)
        assert.deepEqual(stats.inference_stats[phase], batch[phase], `${model} ${phase}`);
    }
  });

  it("a step without its sequence's START is no failure; the pending gauge counts the sequence waiting for the slot, not the one running", async () => {
    const refused = await infer("steps", [1], { sequence_id: 999 });
    assert.equal(refused.status, 400, JSON.stringify(refused.body));
    assert.equal((await statsOf("steps")).inference_stats.fail.count, 0);
    assert.equal(
      await metricValue(server.metricsUrl, "nv_inference_request_failure", {
        model: "steps",
        reason: "OTHER",
      }),
      0,
    );

    // One slot: sequence 1 runs a long step, sequence 2 waits in the backlog for the slot.
    const running = infer("steps", [1500], { sequence_id: 1, sequence_start: true, sequence_end: true });
    await eventOf(repository.eventsFile, "the long step to run", (event) => event.value === 1500);
    const waiting = infer("steps", [7], { sequence_id: 2, sequence_start: true, sequence_end: true });
    for (let tries = 0; tries < 200; tries++) {
      const summary = (await getJson(`${server.url}/v2/models/steps/sequences`)).body.summary as {
        backlog: number;
      };
      if (summary.backlog === 1) break;
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
    assert.equal(
      await metricValue(server.metricsUrl, "nv_inference_pending_request_count", { model: "steps" }),
      1,
    );
    assert.equal((await running).status, 200);
    assert.equal((await waiting).status, 200);
    assert.equal(
      await metricValue(server.metricsUrl, "nv_inference_pending_request_count", { model: "steps" }),
      0,
    );
  });
});
