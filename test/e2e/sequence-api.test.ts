import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { accumulatorModel } from "../../tools/onnx/sequence-models.ts";
import { deleteJson, infer } from "../support/http-client.ts";
import {
  accumulate,
  accumulatorConfig,
  assertError,
  findSequence,
  int32Input,
  listSequences,
  metricValue,
  startFlagMessage,
  waitForSequence,
} from "../support/sequence-kit.ts";
import { startTestServer, type TestServer } from "../support/test-server.ts";

// seqserve's sequences API (GET lists live and backlogged sequences with a summary;
// DELETE ends one now) and the sequence metrics on the metrics port, which read the same
// summary.

const IDLE = "max_sequence_idle_microseconds: 60000000";
const WAIT_FOR_BOTH = `${IDLE}
  direct { max_queue_delay_microseconds: 30000000 minimum_slot_utilization: 1 }`;

let server: TestServer;
before(async () => {
  server = await startTestServer({
    api: { config: accumulatorConfig("api", 4, IDLE), onnx: accumulatorModel() },
    api_pair: { config: accumulatorConfig("api_pair", 2, WAIT_FOR_BOTH), onnx: accumulatorModel() },
    api_one: { config: accumulatorConfig("api_one", 1, IDLE), onnx: accumulatorModel() },
  });
});
after(() => server.stop());

describe("sequences API and metrics", { timeout: 60_000 }, () => {
  it("GET lists each sequence's id, status, age, idle time, steps, state bytes, instance and slot", async () => {
    await accumulate(server.url, "api", 1, { id: 1, start: true });
    await accumulate(server.url, "api", 1, { id: 1 });
    await accumulate(server.url, "api", 1, { id: 1 });
    await accumulate(server.url, "api", 2, { id: "two", start: true });
    const listing = await listSequences(server.url, "api");
    assert.equal(listing.sequences.length, 2);
    const [one, two] = listing.sequences;
    assert.deepEqual(
      { ...one, ageMs: 0, idleMs: 0 },
      {
        id: 1n,
        idType: "uint64",
        status: "active",
        ageMs: 0,
        idleMs: 0,
        steps: 3,
        queued: 0,
        stateBytes: 4,
        instance: "api_0",
        slot: 0,
        expiresAt: null,
      },
    );
    assert.deepEqual(
      { ...two, ageMs: 0, idleMs: 0 },
      {
        id: "two",
        idType: "string",
        status: "active",
        ageMs: 0,
        idleMs: 0,
        steps: 1,
        queued: 0,
        stateBytes: 4,
        instance: "api_0",
        slot: 1,
        expiresAt: null,
      },
    );
    // Age counts from the start, idle time from the last request.
    assert.ok(one!.ageMs >= one!.idleMs && one!.idleMs >= 0);
    assert.ok(one!.ageMs >= two!.ageMs);
    assert.deepEqual(listing.summary, {
      live: 2,
      backlog: 0,
      state_bytes: 8,
      // Slabs of the model's slots (max_batch_size 4): 4 rows of one INT32 each.
      state_allocated_bytes: 16,
      ended: {
        end: 0,
        timeout: 0,
        restart: 0,
        forced: 0,
        cancelled: 0,
        backlog_timeout: 0,
        evicted: 0,
        shutdown: 0,
        expired: 0,
        unloaded: 0,
        reloaded: 0,
        instance_failed: 0,
        state_lost: 0,
      },
    });
    assert.equal(await accumulate(server.url, "api", 0, { id: "two", end: true }), 2);
  });

  it('keeps the uint64 id 77 and the string id "77" apart, and DELETE addresses either', async () => {
    assert.equal(await accumulate(server.url, "api", 5, { id: 77, start: true }), 5);
    assert.equal(await accumulate(server.url, "api", 100, { id: "77", start: true }), 100);
    assert.equal(await accumulate(server.url, "api", 1, { id: 77 }), 6);
    assert.equal(await accumulate(server.url, "api", 1, { id: "77" }), 101);
    const deleted = await deleteJson(`${server.url}/v2/models/api/sequences/77?id_type=string`);
    assert.equal(deleted.status, 200);
    assert.equal(await findSequence(server.url, "api", "77"), undefined);
    assert.equal(await accumulate(server.url, "api", 1, { id: 77 }), 7);
    assert.equal((await deleteJson(`${server.url}/v2/models/api/sequences/77`)).status, 200);
    assert.equal(await findSequence(server.url, "api", 77), undefined);
  });

  it("DELETE ends a sequence now: its next request needs START, the end counts as 'forced'", async () => {
    const before = (await listSequences(server.url, "api")).summary.ended.forced!;
    assert.equal(await accumulate(server.url, "api", 9, { id: 1 }), 12);
    assert.equal((await deleteJson(`${server.url}/v2/models/api/sequences/1`)).status, 200);
    assertError(await infer(server.url, "api", int32Input(1), { id: 1 }), 400, startFlagMessage(1, "api"));
    assertError(
      await deleteJson(`${server.url}/v2/models/api/sequences/1`),
      404,
      "sequence 1 is not live in model 'api'",
    );
    assertError(
      await deleteJson(`${server.url}/v2/models/api/sequences/18446744073709551615`),
      404,
      "sequence 18446744073709551615 is not live in model 'api'",
    );
    assertError(
      await deleteJson(`${server.url}/v2/models/api/sequences/nobody`),
      404,
      "sequence nobody is not live in model 'api'",
    );
    const { summary } = await listSequences(server.url, "api");
    assert.equal(summary.ended.forced, before + 1);
    // A new START on the id begins afresh.
    assert.equal(await accumulate(server.url, "api", 2, { id: 1, start: true, end: true }), 2);
  });

  it("DELETE of a sequence with a waiting request fails that request and frees the state", async () => {
    // Utilization 1 on two slots: the lone sequence's second request waits for a partner.
    const partner = accumulate(server.url, "api_pair", 1, { id: 2, start: true });
    assert.equal(await accumulate(server.url, "api_pair", 10, { id: 1, start: true }), 10);
    assert.equal(await partner, 1);
    const waiting = infer(server.url, "api_pair", int32Input(5), { id: 1 });
    await waitForSequence(server.url, "api_pair", 1, (s) => s.queued === 1);
    assert.equal((await deleteJson(`${server.url}/v2/models/api_pair/sequences/1`)).status, 200);
    const failed = await waiting;
    assert.equal(failed.status, 400);
    assert.match(String(failed.body.error), /sequence 1 .*ended through the sequences API/);
    const { sequences, summary } = await listSequences(server.url, "api_pair");
    assert.deepEqual(
      sequences.map((s) => s.id),
      [2n],
    );
    assert.deepEqual([summary.live, summary.state_bytes, summary.ended.forced], [1, 4, 1]);
    assert.equal((await deleteJson(`${server.url}/v2/models/api_pair/sequences/2`)).status, 200);
  });

  it("reports live, backlogged, state bytes and ends by reason as metrics", async () => {
    const labels = { model: "api_one", version: "1" };
    const metric = (name: string, extra: Record<string, string> = {}) =>
      metricValue(server.metricsUrl, name, { ...labels, ...extra });
    assert.equal(await accumulate(server.url, "api_one", 3, { id: 1, start: true }), 3);
    const second = infer(server.url, "api_one", int32Input(4), { id: 2, start: true });
    await waitForSequence(server.url, "api_one", 2, (s) => s.status === "backlogged");
    assert.equal(await metric("seqserve_sequences_live"), 1);
    assert.equal(await metric("seqserve_sequence_backlog"), 1);
    assert.equal(await metric("seqserve_sequence_state_bytes"), 4);
    assert.equal(await metric("seqserve_sequences_ended_total", { reason: "forced" }), 0);

    // DELETE a backlogged sequence: its waiting START fails, it never took a slot.
    assert.equal((await deleteJson(`${server.url}/v2/models/api_one/sequences/2`)).status, 200);
    assertError(await second, 400, "sequence 2 of model 'api_one' was ended through the sequences API");
    assert.equal(await metric("seqserve_sequence_backlog"), 0);
    assert.equal(await metric("seqserve_sequences_ended_total", { reason: "forced" }), 1);

    assert.equal(await accumulate(server.url, "api_one", 1, { id: 1, end: true }), 4);
    assert.equal(await metric("seqserve_sequences_live"), 0);
    assert.equal(await metric("seqserve_sequence_state_bytes"), 0);
    assert.equal(await metric("seqserve_sequences_ended_total", { reason: "end" }), 1);
    for (const reason of ["timeout", "restart", "cancelled", "backlog_timeout", "evicted", "shutdown"]) {
      assert.equal(await metric("seqserve_sequences_ended_total", { reason }), 0, reason);
    }
  });
});
