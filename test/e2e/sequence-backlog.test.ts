import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { accumulatorModel } from "../../tools/onnx/sequence-models.ts";
import { type HttpAnswer, infer } from "../support/http-client.ts";
import {
  accumulate,
  accumulatorConfig,
  assertError,
  findSequence,
  int32Input,
  listSequences,
  sleep,
  startFlagMessage,
  waitFor,
  waitForSequence,
} from "../support/sequence-kit.ts";
import { startTestServer, type TestServer } from "../support/test-server.ts";

// The backlog and the idle timeout (Triton's test_backlog_* and sequence idle cases):
// sequences beyond the slots wait in a FIFO backlog and take the first slot freed; the
// backlog is bounded (seqserve), a backlogged start may carry a `timeout`; a sequence idle
// for max_sequence_idle_microseconds loses its slot (unless the idle timeout is "never").

const IDLE_LONG = "max_sequence_idle_microseconds: 60000000";

let server: TestServer;
before(async () => {
  const model = (name: string, maxBatchSize: number, batching: string, extra = "") => ({
    config: accumulatorConfig(name, maxBatchSize, batching, extra),
    onnx: accumulatorModel(),
  });
  const param = (key: string, value: string) =>
    `parameters { key: "${key}" value { string_value: "${value}" } }`;
  server = await startTestServer({
    backlog: model("backlog", 4, IDLE_LONG),
    refill: model("refill", 4, IDLE_LONG),
    bounded: model("bounded", 1, IDLE_LONG, param("sequence_backlog_limit", "1")),
    single: model("single", 1, IDLE_LONG),
    expiring: model("expiring", 1, IDLE_LONG),
    idle: model("idle", 1, "max_sequence_idle_microseconds: 300000"),
    idle_control: model("idle_control", 1, "max_sequence_idle_microseconds: 300000"),
    idle_wait: model("idle_wait", 1, "max_sequence_idle_microseconds: 500000"),
    idle_never: model(
      "idle_never",
      1,
      "max_sequence_idle_microseconds: 300000",
      param("sequence_idle_timeout", "never"),
    ),
  });
});
after(() => server.stop());

/** A request whose answer is kept, so a test can see whether it has come back yet. */
function tracked(answer: Promise<number>): { done: () => boolean; answer: Promise<number> } {
  let settled = false;
  const watched = answer.finally(() => {
    settled = true;
  });
  return { done: () => settled, answer: watched };
}

describe("backlog and idle timeout", { timeout: 60_000 }, () => {
  it("a 5th sequence on 4 slots waits in the backlog and runs once a slot frees", async () => {
    for (const id of [1, 2, 3, 4])
      assert.equal(await accumulate(server.url, "backlog", id, { id, start: true }), id);
    const fifth = tracked(accumulate(server.url, "backlog", 50, { id: 5, start: true }));
    const waiting = await waitForSequence(server.url, "backlog", 5);
    assert.deepEqual(
      [waiting.status, waiting.slot, waiting.instance, waiting.queued],
      ["backlogged", null, null, 1],
    );
    let { summary } = await listSequences(server.url, "backlog");
    assert.deepEqual([summary.live, summary.backlog], [4, 1]);
    // The live sequences go on while the 5th waits.
    assert.equal(await accumulate(server.url, "backlog", 1, { id: 3 }), 4);
    assert.equal(fifth.done(), false);

    const freed = (await findSequence(server.url, "backlog", 2))!.slot;
    assert.equal(await accumulate(server.url, "backlog", 1, { id: 2, end: true }), 3);
    assert.equal(await fifth.answer, 50);
    const placed = await findSequence(server.url, "backlog", 5);
    assert.deepEqual([placed?.status, placed?.slot, placed?.steps], ["active", freed, 1]);
    ({ summary } = await listSequences(server.url, "backlog"));
    assert.deepEqual([summary.live, summary.backlog], [4, 0]);
    assert.equal(await accumulate(server.url, "backlog", 1, { id: 5, end: true }), 51);
    for (const id of [1, 3, 4]) await accumulate(server.url, "backlog", 0, { id, end: true });
    assert.equal((await listSequences(server.url, "backlog")).summary.live, 0);
  });

  it("the backlog refills freed slots in arrival order (FIFO)", async () => {
    for (const id of [1, 2, 3, 4]) await accumulate(server.url, "refill", id, { id, start: true });
    const sixth = tracked(accumulate(server.url, "refill", 60, { id: 6, start: true }));
    await waitForSequence(server.url, "refill", 6);
    const seventh = tracked(accumulate(server.url, "refill", 70, { id: 7, start: true }));
    await waitForSequence(server.url, "refill", 7);
    assert.equal((await listSequences(server.url, "refill")).summary.backlog, 2);

    // A short sequence ends: the oldest backlogged sequence (6) takes its slot, 7 waits.
    assert.equal(await accumulate(server.url, "refill", 1, { id: 1, end: true }), 2);
    assert.equal(await sixth.answer, 60);
    assert.equal(seventh.done(), false);
    assert.equal((await findSequence(server.url, "refill", 7))?.status, "backlogged");
    // 6 is a full sequence: it can end too, freeing the slot for 7.
    assert.equal(await accumulate(server.url, "refill", 6, { id: 6, end: true }), 66);
    assert.equal(await seventh.answer, 70);
    assert.equal(await accumulate(server.url, "refill", 7, { id: 7, end: true }), 77);
    for (const id of [2, 3, 4]) await accumulate(server.url, "refill", 0, { id, end: true });
    const { summary } = await listSequences(server.url, "refill");
    assert.deepEqual([summary.live, summary.backlog, summary.ended.end], [0, 0, 6]);
  });

  it("a backlogged sequence queues its further requests (END included) and runs them in order once placed", async () => {
    assert.equal(await accumulate(server.url, "single", 1, { id: 1, start: true }), 1);
    const start = accumulate(server.url, "single", 5, { id: 2, start: true });
    await waitForSequence(server.url, "single", 2, (s) => s.queued === 1);
    const middle = accumulate(server.url, "single", 6, { id: 2 });
    await waitForSequence(server.url, "single", 2, (s) => s.queued === 2);
    const end = accumulate(server.url, "single", 7, { id: 2, end: true });
    await waitForSequence(server.url, "single", 2, (s) => s.queued === 3);
    const third = tracked(accumulate(server.url, "single", 9, { id: 3, start: true }));
    await waitForSequence(server.url, "single", 3);
    let { summary } = await listSequences(server.url, "single");
    assert.deepEqual([summary.live, summary.backlog], [1, 2]);

    assert.equal(await accumulate(server.url, "single", 1, { id: 1, end: true }), 2);
    assert.deepEqual(await Promise.all([start, middle, end]), [5, 11, 18]);
    // Sequence 2 ended on its END: the slot passes on to 3.
    assert.equal(await third.answer, 9);
    ({ summary } = await listSequences(server.url, "single"));
    assert.deepEqual([summary.live, summary.backlog, summary.ended.end], [1, 0, 2]);
    assert.equal(await accumulate(server.url, "single", 1, { id: 3, end: true }), 10);
  });

  it("a START on a backlogged id restarts it: the old life's START runs, then the new life's", async () => {
    assert.equal(await accumulate(server.url, "single", 1, { id: 11, start: true }), 1);
    const oldLife = accumulate(server.url, "single", 5, { id: 12, start: true });
    await waitForSequence(server.url, "single", 12);
    const newLife = accumulate(server.url, "single", 50, { id: 12, start: true });
    await waitFor("both lives of id 12", async () => {
      const { sequences } = await listSequences(server.url, "single");
      return sequences.filter((s) => s.id === 12n).length === 2 ? sequences : undefined;
    });
    // Both lives wait for the slot; neither holds one.
    const { sequences, summary } = await listSequences(server.url, "single");
    assert.deepEqual(
      sequences.map((s) => [s.id, s.status, s.slot]),
      [
        [11n, "active", 0],
        [12n, "backlogged", null],
        [12n, "backlogged", null],
      ],
    );
    assert.deepEqual([summary.live, summary.backlog], [1, 2]);
    assert.equal(await accumulate(server.url, "single", 1, { id: 11, end: true }), 2);
    assert.deepEqual(await Promise.all([oldLife, newLife]), [5, 50]);
    assert.equal(await accumulate(server.url, "single", 1, { id: 12, end: true }), 51);
    const done = (await listSequences(server.url, "single")).summary;
    assert.deepEqual([done.live, done.backlog, done.ended.restart], [0, 0, 1]);
  });

  it("a start beyond sequence_backlog_limit gets 503 with Retry-After at once", async () => {
    assert.equal(await accumulate(server.url, "bounded", 1, { id: 1, start: true }), 1);
    const second = tracked(accumulate(server.url, "bounded", 2, { id: 2, start: true }));
    await waitForSequence(server.url, "bounded", 2, (s) => s.status === "backlogged");
    const refused = await infer(server.url, "bounded", int32Input(3), { id: 3, start: true });
    assertError(refused, 503, /backlog of 1 sequences is full/);
    assert.match(refused.headers["retry-after"] ?? "", /^[1-9]\d*$/);
    assert.equal(await findSequence(server.url, "bounded", 3), undefined);
    assert.equal(second.done(), false);
    // Once the slot frees, the backlogged one runs, and there is room to wait again.
    await accumulate(server.url, "bounded", 0, { id: 1, end: true });
    assert.equal(await second.answer, 2);
    const third = tracked(accumulate(server.url, "bounded", 3, { id: 3, start: true }));
    await waitForSequence(server.url, "bounded", 3, (s) => s.status === "backlogged");
    await accumulate(server.url, "bounded", 0, { id: 2, end: true });
    assert.equal(await third.answer, 3);
    await accumulate(server.url, "bounded", 0, { id: 3, end: true });
  });

  it("a backlogged start's `timeout` expires with Triton's message (503)", async () => {
    assert.equal(await accumulate(server.url, "expiring", 1, { id: 1, start: true }), 1);
    const expiring: Promise<HttpAnswer> = infer(server.url, "expiring", int32Input(2), {
      id: 2,
      start: true,
      timeoutUs: 1_000_000,
    });
    await waitForSequence(server.url, "expiring", 2);
    // A further request queued behind the waiting START expires with it.
    const queued = infer(server.url, "expiring", int32Input(3), { id: 2 });
    await waitForSequence(server.url, "expiring", 2, (s) => s.queued === 2);
    assertError(await expiring, 503, "timeout of the corresponding sequence has been expired");
    assertError(await queued, 503, "timeout of the corresponding sequence has been expired");
    const { summary, sequences } = await listSequences(server.url, "expiring");
    assert.equal(summary.ended.backlog_timeout, 1);
    assert.deepEqual(
      sequences.map((s) => s.id),
      [1n],
    );
    // The expired sequence is gone; the live one was not disturbed.
    assertError(
      await infer(server.url, "expiring", int32Input(2), { id: 2 }),
      400,
      startFlagMessage(2, "expiring"),
    );
    assert.equal(await accumulate(server.url, "expiring", 1, { id: 1, end: true }), 2);
  });

  it("an idle sequence loses its slot to a backlogged one, and then needs START", async () => {
    assert.equal(await accumulate(server.url, "idle", 5, { id: 1, start: true }), 5);
    // 2 waits for the only slot; sequence 1 sends nothing more and times out.
    assert.equal(await accumulate(server.url, "idle", 7, { id: 2, start: true }), 7);
    const { summary } = await listSequences(server.url, "idle");
    assert.ok(summary.ended.timeout! >= 1);
    assert.equal(await findSequence(server.url, "idle", 1), undefined);
    assertError(await infer(server.url, "idle", int32Input(1), { id: 1 }), 400, startFlagMessage(1, "idle"));
    // 2 times out in its turn: both ends are counted as timeouts, nothing is left.
    const done = await waitFor("both sequences to time out", async () => {
      const listing = await listSequences(server.url, "idle");
      return listing.summary.live === 0 ? listing.summary : undefined;
    });
    assert.deepEqual([done.ended.timeout, done.ended.end, done.backlog, done.state_bytes], [2, 0, 0, 0]);
    assertError(await infer(server.url, "idle", int32Input(1), { id: 2 }), 400, startFlagMessage(2, "idle"));
  });

  it("a sequence that waited in the backlog longer than the idle timeout is not timed out once it gets its slot", async () => {
    assert.equal(await accumulate(server.url, "idle_wait", 1, { id: 1, start: true }), 1);
    const waiting = tracked(accumulate(server.url, "idle_wait", 10, { id: 2, start: true }));
    await waitForSequence(server.url, "idle_wait", 2, (s) => s.status === "backlogged");
    // Sequence 1 stays busy (a request every 100 ms) for well over the 500 ms idle timeout
    // while 2 waits for the slot; the idle clock only runs for sequences that hold a slot.
    const busyUntil = Date.now() + 1200;
    let sum = 1;
    while (Date.now() < busyUntil) {
      await sleep(100);
      sum = await accumulate(server.url, "idle_wait", 1, { id: 1 });
    }
    assert.equal(waiting.done(), false);
    assert.equal(await accumulate(server.url, "idle_wait", 1, { id: 1, end: true }), sum + 1);
    assert.equal(await waiting.answer, 10);
    // Its next requests, sent at once, find it alive with its state.
    assert.equal(await accumulate(server.url, "idle_wait", 5, { id: 2 }), 15);
    assert.equal(await accumulate(server.url, "idle_wait", 5, { id: 2, end: true }), 20);
    const { summary } = await listSequences(server.url, "idle_wait");
    assert.deepEqual([summary.ended.end, summary.ended.timeout], [2, 0]);
  });

  it("sequence_idle_timeout 'never' keeps an idle sequence alive", async () => {
    assert.equal(await accumulate(server.url, "idle_never", 5, { id: 1, start: true }), 5);
    assert.equal(await accumulate(server.url, "idle_control", 5, { id: 1, start: true }), 5);
    // The same idle time ends the control model's sequence...
    await waitFor("the control sequence to time out", async () =>
      (await listSequences(server.url, "idle_control")).summary.ended.timeout === 1 ? true : undefined,
    );
    // ...and, well beyond it, the 'never' model's sequence is still live with its state.
    await sleep(600);
    const kept = await findSequence(server.url, "idle_never", 1);
    assert.equal(kept?.status, "active");
    assert.ok(kept!.idleMs >= 600);
    assert.equal(await accumulate(server.url, "idle_never", 1, { id: 1, end: true }), 6);
    assert.equal((await listSequences(server.url, "idle_never")).summary.ended.timeout, 0);
  });
});
