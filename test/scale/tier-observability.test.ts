import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { accumulatorModel } from "../../tools/onnx/sequence-models.ts";
import { infer, outputData } from "../support/http-client.ts";
import { type TempRepository, tempRepository } from "../support/model-repository.ts";
import { accumulatorConfig, int32Input, metricValue, waitFor } from "../support/sequence-kit.ts";
import { missingTools, RedisServer, Replica } from "./support/scale-kit.ts";

// An operator sees the state store's troubles: a store that fails requests (here a full
// Redis) is logged at its first failure and then summed up once an interval, not once per
// failure; its return is logged, as is a connection's; and the metrics count the store's
// requests (their durations), its failures by kind, and what the store did for each model.

const MODEL = "acc";
const CONFIG = accumulatorConfig(
  MODEL,
  8,
  "max_sequence_idle_microseconds: 60000000\n  oldest { max_candidate_sequences: 64 }",
);

const skip = missingTools(["redis-server", "redis-cli"]);

describe("the state store's failures, for operators", { skip }, () => {
  let repository: TempRepository;
  let redis: RedisServer;
  let replica: Replica;
  let metricsUrl: string;

  before(async () => {
    repository = tempRepository({ [MODEL]: { config: CONFIG, onnx: accumulatorModel() } });
    redis = await RedisServer.start();
    replica = new Replica(repository.path, redis.url);
    await replica.ready();
    metricsUrl = `http://127.0.0.1:${(await replica.process.listening).metrics_port}/metrics`;
  });

  after(async () => {
    await replica?.stop();
    await redis?.stop();
    repository?.remove();
  });

  const linesOf = (event: string) => replica.process.lines.filter((line) => line.event === event);

  it("logs a failing store once, sums it up, says when it answers again, and counts it", async () => {
    assert.equal(
      outputData(await infer(replica.url, MODEL, int32Input(1), { id: 1, start: true }), "OUTPUT")[0],
      1,
    );
    assert.equal((await infer(replica.url, MODEL, int32Input(1), { id: 3, start: true })).status, 200);
    redis.cli("config", "set", "maxmemory-policy", "noeviction");
    redis.cli("config", "set", "maxmemory", "1");
    try {
      for (let i = 0; i < 5; i++) {
        const refused = await infer(replica.url, MODEL, int32Input(1), { id: 1 });
        assert.equal(refused.status, 503, JSON.stringify(refused.body));
        // An end the full store takes says nothing of its writes: no "answers again".
        if (i === 1)
          assert.equal((await infer(replica.url, MODEL, int32Input(1), { id: 3, end: true })).status, 200);
      }
      assert.equal((await infer(replica.url, MODEL, int32Input(1), { id: 2, start: true })).status, 503);
      // One line at the first failure, saying what fails and why.
      const failing = linesOf("state_store_failing");
      assert.equal(failing.length, 1, JSON.stringify(failing));
      assert.equal(failing[0]!.level, 40);
      assert.match(
        failing[0]!.msg as string,
        /^the state store at redis:\/\/127\.0\.0\.1:\d+ fails requests: a write failed \(the state store is full \(maxmemory\): .*\); further failures are summed up every 10 s/,
      );
      // The others, in one line once the interval is over.
      const summed = await waitFor(
        "the failures' summary",
        async () => linesOf("state_store_failures")[0],
        20_000,
      );
      assert.match(
        summed.msg as string,
        /failed 5 more request\(s\): 5 write \(full\); the last: the state store is full/,
      );
    } finally {
      redis.cli("config", "set", "maxmemory", "0");
    }
    assert.equal(outputData(await infer(replica.url, MODEL, int32Input(1), { id: 1 }), "OUTPUT")[0], 2);
    // The replica's log comes by its standard output, which may trail the answer.
    await waitFor("the store's return in the log", async () => linesOf("state_store_recovered")[0], 10_000);
    const recovered = linesOf("state_store_recovered");
    assert.equal(recovered.length, 1);
    assert.match(recovered[0]!.msg as string, /answers again: 6 request\(s\) failed since /);

    // The metrics: the store's failures by kind, its requests' durations, and per model.
    assert.equal(
      await metricValue(metricsUrl, "seqserve_state_store_failures_total", {
        operation: "write",
        kind: "full",
      }),
      6,
    );
    const writes = await metricValue(metricsUrl, "seqserve_state_store_request_duration_seconds_count", {
      operation: "write",
    });
    assert.ok(writes !== undefined && writes >= 8, `writes timed: ${writes}`);
    assert.equal(
      await metricValue(metricsUrl, "seqserve_state_store_write_failures_total", {
        model: MODEL,
        version: "1",
      }),
      6,
    );
    for (const name of [
      "seqserve_state_store_sequences_loaded_total",
      "seqserve_state_store_conflicts_total",
      "seqserve_state_store_handed_over_total",
    ]) {
      assert.equal(await metricValue(metricsUrl, name, { model: MODEL, version: "1" }), 0, name);
    }
    assert.equal(((await replica.summary(MODEL)).tier as { write_failures: number }).write_failures, 6);
  });

  it("logs a lost connection once, and its return", async () => {
    // Down long enough for the client's reconnections to fail.
    await redis.restart(1000);
    await waitFor("the connection's error", async () => linesOf("state_store_error")[0]);
    const back = await waitFor("the connection's return", async () => linesOf("state_store_connected")[0]);
    assert.equal(back.level, 30);
    assert.match(back.msg as string, /^the state store at redis:\/\/127\.0\.0\.1:\d+ is connected again$/);
  });
});
