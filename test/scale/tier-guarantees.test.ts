import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { accumulatorModel, scaledAccumulatorConfig } from "../../tools/onnx/sequence-models.ts";
import { StreamClient } from "../http/support/ws-client.ts";
import {
  closeSession,
  containerMessage,
  invoke,
  jsonAnswer,
  newSession,
  openSession,
  sdkClient,
  sdkError,
} from "../sagemaker/support/sagemaker-kit.ts";
import {
  deleteJson,
  getJson,
  type HttpAnswer,
  infer,
  inferBody,
  outputData,
  postJson,
  type SequenceParams,
} from "../support/http-client.ts";
import { type TempRepository, tempRepository } from "../support/model-repository.ts";
import { accumulatorConfig, int32Input } from "../support/sequence-kit.ts";
import {
  missingTools,
  Nginx,
  RedisServer,
  Replica,
  SharedStoreCluster,
  startReplicas,
  stopReplicas,
} from "./support/scale-kit.ts";

// What the shared state tier promises, replica against replica (no balancer: each test
// sends to the replica it means): two replicas racing on one sequence never both advance
// it from the same state; a numbered step sent to both is applied once; a replica stopped
// with SIGTERM hands its sequences over, within its exit timeout even when Redis does not
// answer, and a stream it cuts does not end its sequence; a step answered without a write
// renews its record's expiry; a Redis restart without persistence is reported, naming the
// sequences lost, instead of their state silently starting over, and no server-assigned
// id is given out again after it; a sequence belongs to the API key that started it on
// whichever replica it goes on; a SageMaker session opened on one replica goes on and is
// closed on the other, and its numbered CLOSE retried on either gets the close's answer,
// through the AWS SDK.

const MODEL = "acc";
const BATCHING = "max_sequence_idle_microseconds: 60000000\n  oldest { max_candidate_sequences: 64 }";
const CONFIG = accumulatorConfig(MODEL, 8, BATCHING);
/** A second sequence model: a session id must be looked up across both. */
const SECOND = "acc_second";
/** A model with one sequence slot: a START waits while another sequence holds it. */
const ONE_SLOT = "acc_one_slot";
/** The accumulator times a scalar every request of a batch shares (as Silero VAD's `sr`). */
const SCALED = "acc_scaled";
const SCALED_CONFIG = scaledAccumulatorConfig(SCALED, 8, BATCHING);

const skip = missingTools(["redis-server", "redis-cli"]);

const pause = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

async function add(
  replica: Replica,
  value: number,
  sequence: SequenceParams,
  model = MODEL,
): Promise<HttpAnswer> {
  const scale = { name: "SCALE", datatype: "INT32", shape: [], data: [1] };
  return infer(
    replica.url,
    model,
    model === SCALED ? [...int32Input(value), scale] : int32Input(value),
    sequence,
  );
}

function sum(answer: HttpAnswer): number {
  return outputData(answer, "OUTPUT")[0] as number;
}

/** An inference's status and the text of its answer, whatever the status. */
async function inferText(
  replica: Replica,
  model: string,
  value: number,
  sequence: SequenceParams,
): Promise<{ status: number; text: string }> {
  const response = await fetch(`${replica.url}/v2/models/${model}/infer`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: inferBody(int32Input(value), sequence),
  });
  return { status: response.status, text: await response.text() };
}

/** A START that lets the server assign the id; the id read exactly (a uint64 above 2^53). */
async function startWithoutId(replica: Replica, value: number): Promise<{ id: bigint; sum: number }> {
  const response = await fetch(`${replica.url}/v2/models/${MODEL}/infer`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: inferBody(int32Input(value), { start: true }),
  });
  const text = await response.text();
  assert.equal(response.status, 200, text);
  const id = /"sequence_id":(\d+)/.exec(text);
  assert.ok(id !== null, text);
  return { id: BigInt(id[1]!), sum: sum({ status: 200, headers: {}, body: JSON.parse(text) }) };
}

describe("the shared state tier's guarantees", { skip }, () => {
  let cluster: SharedStoreCluster;
  let redis: RedisServer;
  let repository: TempRepository;
  let a: Replica;
  let b: Replica;

  before(async () => {
    repository = tempRepository({
      [MODEL]: { config: CONFIG, onnx: accumulatorModel() },
      [SECOND]: { config: accumulatorConfig(SECOND, 8, BATCHING), onnx: accumulatorModel() },
      [SCALED]: { config: SCALED_CONFIG, onnx: accumulatorModel({ scaled: true }) },
      [ONE_SLOT]: {
        config: accumulatorConfig(
          ONE_SLOT,
          8,
          "max_sequence_idle_microseconds: 60000000\n  oldest { max_candidate_sequences: 1 }",
        ),
        onnx: accumulatorModel(),
      },
    });
    const sagemaker = ["--allow-sagemaker", "true", "--sagemaker-port", "0"];
    cluster = await SharedStoreCluster.start(repository.path, [sagemaker, sagemaker]);
    redis = cluster.redis;
    [a, b] = cluster.replicas as [Replica, Replica];
  });

  after(async () => {
    await cluster?.stop();
    repository?.remove();
  });

  // The loser of a race runs its step again: the model (one with a shared input too) must
  // still have the step's tensors, which its first run took to the worker.
  for (const [model, id] of [
    [MODEL, 101],
    [SCALED, 102],
  ] as const)
    it(`two replicas racing on one sequence never both advance it from the same state (${model})`, async () => {
      assert.equal(sum(await add(a, 0, { id, start: true }, model)), 0);
      let total = 0;
      for (let round = 0; round < 20; round++) {
        const [fromA, fromB] = await Promise.all([add(a, 1, { id }, model), add(b, 10, { id }, model)]);
        const ok = [fromA, fromB].filter((answer) => answer.status === 200);
        for (const answer of [fromA, fromB]) {
          if (answer.status !== 200) {
            // The loser may give up after retrying on the winner's state: it says so.
            assert.equal(answer.status, 503, JSON.stringify(answer.body));
            assert.match(answer.body.error as string, /advanced by another replica/);
          }
        }
        const sums = ok.map(sum).sort((x, y) => x - y);
        // Serialised: one step on top of the other. Both from `total` would be total+1 and total+10.
        if (sums.length === 2) {
          assert.ok(
            (sums[0] === total + 1 || sums[0] === total + 10) && sums[1] === total + 11,
            `round ${round}: from ${total} the answers were ${sums.join(", ")}`,
          );
          total += 11;
        } else {
          assert.equal(sums.length, 1, `round ${round}: neither step was applied`);
          assert.ok(sums[0] === total + 1 || sums[0] === total + 10);
          total = sums[0]!;
        }
      }
      // Both replicas see the same sequence: the sum of every step that was answered.
      assert.equal(sum(await add(a, 0, { id }, model)), total);
      assert.equal(sum(await add(b, 0, { id, end: true }, model)), total);
      const conflicts = [await a.summary(model), await b.summary(model)].reduce(
        (n, s) => n + (s.tier as { conflicts: number }).conflicts,
        0,
      );
      assert.ok(conflicts > 0, "stale copies were caught by the version check");
    });

  it("a numbered step sent to two replicas at once is applied once, and both get its answer", async () => {
    const id = 202;
    assert.equal(sum(await add(a, 5, { id, start: true, step: 1 })), 5);
    for (let step = 2; step <= 11; step++) {
      const [fromA, fromB] = await Promise.all([add(a, 3, { id, step }), add(b, 3, { id, step })]);
      assert.equal(fromA.status, 200, JSON.stringify(fromA.body));
      assert.equal(fromB.status, 200, JSON.stringify(fromB.body));
      assert.equal(sum(fromA), 5 + 3 * (step - 1));
      assert.equal(sum(fromB), 5 + 3 * (step - 1));
    }
    // A step from before the kept answers, and one past the next, are refused by name.
    const gap = await add(a, 1, { id, step: 14 });
    assert.equal(gap.status, 400);
    assert.match(
      gap.body.error as string,
      /step 14 of sequence 202 .* cannot run yet: the sequence has applied 11 steps/,
    );
    assert.equal(sum(await add(b, 0, { id, step: 12, end: true })), 35);
    // The END's answer is kept with the ended sequence: a retry of it is answered.
    assert.equal(sum(await add(a, 0, { id, step: 12, end: true })), 35);
  });

  it("a step answered from its recorded answer, or refused by its number, renews the record's expiry, as it keeps the sequence alive", async () => {
    const id = 203;
    const key = `seqserve:seq:${MODEL}:1:u:${id}`;
    const renewed = async (): Promise<number> => {
      let ttl = Number(redis.cli("pttl", key));
      for (let tries = 0; ttl <= 30_000 && tries < 100; tries++) {
        await pause(20);
        ttl = Number(redis.cli("pttl", key));
      }
      return ttl;
    };
    assert.equal(sum(await add(a, 5, { id, start: true, step: 1 })), 5);
    // Time passes as Redis counts it: the record has 30 s of its 60 s idle timeout left.
    // The client, whose answer was lost, retries step 1: it is answered from the record and
    // nothing is written, but the replica's idle clock starts again, and so must the record's.
    assert.equal(redis.cli("pexpire", key, "30000"), "1");
    assert.equal(sum(await add(a, 5, { id, start: true, step: 1 })), 5);
    let ttl = await renewed();
    assert.ok(ttl > 30_000, `after the retry, the record expires in ${ttl} ms`);
    // A step the sequence is not at yet is refused, and counts as activity too.
    assert.equal(redis.cli("pexpire", key, "30000"), "1");
    assert.equal((await add(a, 1, { id, step: 4 })).status, 400);
    ttl = await renewed();
    assert.ok(ttl > 30_000, `after the refused step, the record expires in ${ttl} ms`);
    assert.equal(sum(await add(b, 1, { id, step: 2, end: true })), 6);
  });

  it("a replica stopped with SIGTERM hands its sequences over: they go on, exactly, on another", async () => {
    const leaving = new Replica(repository.path, redis.url);
    await leaving.ready();
    const ids = [301, 302, 303, 304];
    for (const id of ids) {
      assert.equal(sum(await add(leaving, id, { id, start: true, step: 1 })), id);
      assert.equal(sum(await add(leaving, 1, { id, step: 2 })), id + 1);
    }
    const exit = await leaving.process.stop();
    assert.equal(exit.code, 0, exit.stderr);
    const before = (await b.summary(MODEL)).tier as { loaded: number };
    for (const id of ids) {
      assert.equal(sum(await add(b, 2, { id, step: 3 })), id + 3);
      assert.equal(sum(await add(b, 4, { id, step: 4, end: true })), id + 7);
    }
    const after = (await b.summary(MODEL)).tier as { loaded: number };
    assert.equal(after.loaded - before.loaded, ids.length);
    const handedOver = leaving.process.lines.find((line) => line.event === "stopped");
    assert.ok(handedOver !== undefined, "the leaving replica stopped cleanly");
  });

  it("a copy of a sequence that went on elsewhere gives its slot up when a new sequence needs it", async () => {
    // The only slot of a holds 801 until its 60 s idle timeout, unless a lets its copy go.
    assert.equal(sum(await infer(a.url, ONE_SLOT, int32Input(1), { id: 801, start: true })), 1);
    assert.equal(sum(await infer(b.url, ONE_SLOT, int32Input(2), { id: 801 })), 3);
    assert.equal(sum(await infer(b.url, ONE_SLOT, int32Input(3), { id: 801, end: true })), 6);
    const before = (await a.summary(ONE_SLOT)) as {
      ended: Record<string, number>;
      tier: { handed_over: number };
    };
    // Waiting for the slot at most 5 s (then 503): served, the stale copy let go.
    const next = await infer(a.url, ONE_SLOT, int32Input(7), { id: 802, start: true, timeoutUs: 5_000_000 });
    assert.equal(sum(next), 7);
    assert.equal(sum(await infer(a.url, ONE_SLOT, int32Input(1), { id: 802, end: true })), 8);
    const after = (await a.summary(ONE_SLOT)) as {
      ended: Record<string, number>;
      tier: { handed_over: number };
    };
    // Let go, the copy is not an end here (it ended on b): only 802's END is counted.
    assert.equal(after.tier.handed_over - before.tier.handed_over, 1);
    assert.equal(after.ended.end! - before.ended.end!, 1);
    assert.equal(after.ended.timeout, before.ended.timeout);
  });

  it("a WebSocket stream cut by a hand-over does not end its sequence: it goes on on another replica", async () => {
    const leaving = new Replica(repository.path, redis.url);
    await leaving.ready();
    const id = 701;
    const stream = await StreamClient.open(
      { port: leaving.ports.http },
      `/v2/models/${ONE_SLOT}/stream?sequence_id=${id}`,
    );
    const step = (value: number) => ({
      inputs: [{ name: "INPUT", datatype: "INT32", shape: [1, 1], data: [value] }],
    });
    const streamSum = async () => ((await stream.nextText()).outputs as { data: number[] }[])[0]!.data[0];
    stream.send(step(5));
    assert.equal(await streamSum(), 5);
    stream.send(step(1));
    assert.equal(await streamSum(), 6);
    // Another sequence's START waits for the model's only slot, which the stream's sequence
    // holds: the hand-over waits for it (until its timeout) while the endpoints close.
    const order: string[] = [];
    const waiting = inferText(leaving, ONE_SLOT, 100, {
      id: 702,
      start: true,
      timeoutUs: 1_500_000,
    }).then((answer) => {
      order.push("the waiting START answered");
      return answer;
    });
    for (let tries = 0; (await leaving.summary(ONE_SLOT)).backlog !== 1 && tries < 200; tries++)
      await pause(10);
    leaving.process.child.kill("SIGTERM");
    const closed = await stream.closed;
    order.push("the stream closed");
    const started = await waiting;
    const exit = await leaving.process.exit;
    assert.equal(exit.code, 0, exit.stderr);
    // The client reconnects through the balancer and goes on where it was, over a stream
    // that continues the sequence, then over HTTP.
    const again = await StreamClient.open(
      { port: b.ports.http },
      `/v2/models/${ONE_SLOT}/stream?sequence_id=${id}&sequence_start=false`,
    );
    again.send(step(1));
    assert.equal(((await again.nextText()).outputs as { data: number[] }[])[0]!.data[0], 7);
    again.send(step(1));
    assert.equal(((await again.nextText()).outputs as { data: number[] }[])[0]!.data[0], 8);
    // Closed deliberately (1000), the stream ends the sequence: the next start is a new one.
    await again.close(1000);
    for (let tries = 0; (await b.summary(ONE_SLOT)).live !== 0 && tries < 200; tries++) await pause(10);
    assert.equal(sum(await infer(b.url, ONE_SLOT, int32Input(1), { id, start: true })), 1);
    assert.equal(sum(await infer(b.url, ONE_SLOT, int32Input(1), { id, end: true })), 2);
    // The stream was cut while the hand-over waited: the slot never came free.
    assert.equal(started.status, 503, started.text);
    assert.deepEqual(order, ["the stream closed", "the waiting START answered"]);
    // The server said it was going away; a close without a code reads as the client's own.
    assert.equal(closed.code, 1001);
  });

  it("a Redis restart without persistence is reported, naming the sequences lost", async () => {
    const ids = [401, 402, 403];
    for (const id of ids) assert.equal(sum(await add(a, id, { id, start: true })), id);
    await redis.restart();
    for (const id of ids) {
      // Until the replica has reconnected it answers 503 (retry); then it says what happened.
      let answer = await add(a, 1, { id });
      for (let tries = 0; answer.status === 503 && tries < 200; tries++) {
        await pause(25);
        answer = await add(a, 1, { id });
      }
      assert.equal(answer.status, 400, JSON.stringify(answer.body));
      assert.match(
        answer.body.error as string,
        new RegExp(
          `the state of sequence ${id} of model '${MODEL}' was lost: the state store at redis://127\\.0\\.0\\.1:\\d+ lost its data at .* \\(it restarted without persistence\\); start the sequence again`,
        ),
      );
    }
    // The log names them too, and counts them as ended for that reason. (The line comes
    // through the replica's stdout, which may be read after its answers came.)
    const namesThem = (line: (typeof a.process.lines)[number]): boolean =>
      typeof line.msg === "string" &&
      line.msg.includes("lost their state") &&
      ids.every((id) => (line.msg as string).includes(String(id)));
    for (let tries = 0; !a.process.lines.some(namesThem) && tries < 200; tries++) await pause(25);
    const named = a.process.lines.find(namesThem);
    assert.ok(named !== undefined, "the replica's log names the sequences lost");
    assert.ok(a.process.lines.some((line) => line.event === "state_store_lost"));
    // (A copy of an earlier test's sequence, still cached here, is counted with them.)
    const ended = (await a.summary(MODEL)).ended as Record<string, number>;
    assert.ok(ended.state_lost! >= ids.length, JSON.stringify(ended));
    // The sequences start again, and the store works as before.
    assert.equal(sum(await add(a, 7, { id: ids[0]!, start: true })), 7);
    assert.equal(sum(await add(b, 1, { id: ids[0]! })), 8);
  });

  it("server-assigned ids are never handed out twice, even after a Redis restart without persistence", async () => {
    const own = await RedisServer.start();
    const first = new Replica(repository.path, own.url);
    let later: Replica | undefined;
    try {
      await first.ready();
      const lost = await startWithoutId(first, 1);
      await own.restart();
      // Once the replica has reconnected and seen the loss, its sequence is reported lost.
      let answer = await add(first, 1, { id: lost.id });
      for (let tries = 0; answer.status === 503 && tries < 200; tries++) {
        await pause(25);
        answer = await add(first, 1, { id: lost.id });
      }
      assert.match(answer.body.error as string, /was lost/, JSON.stringify(answer.body));
      // A replica started after the restart (a replaced pod) reserves from the counter Redis
      // has now; the one that saw the loss lets go of the ids it had reserved before it.
      later = new Replica(repository.path, own.url);
      await later.ready();
      const started = [
        await startWithoutId(first, 10),
        await startWithoutId(later, 100),
        await startWithoutId(later, 1000),
      ];
      const ids = [lost.id, ...started.map((s) => s.id)];
      assert.equal(new Set(ids).size, ids.length, `ids handed out: ${ids.join(", ")}`);
      // Each client's next step lands on its own sequence, on whichever replica.
      for (const { id, sum: total } of started) assert.equal(sum(await add(later, 5, { id })), total + 5);
    } finally {
      await Promise.all([first.stop(), later?.stop()]);
      await own.stop();
    }
  });

  it("a replica stopped while the store does not answer exits within --exit-timeout-secs", async () => {
    // Redis frozen (SIGSTOP): its connections stay open and nothing is answered, as with a
    // host whose packets are dropped. One replica has nothing to write; the other has a
    // step whose write waits for Redis. Both are given 1 s to stop. What held them was the
    // Redis client's command timeout, 10 s, which an unanswered QUIT (and the write) waited
    // for: a bound of 5 s tells the two apart with room for a slow machine.
    const own = await RedisServer.start();
    const idle = new Replica(repository.path, own.url, ["--exit-timeout-secs", "1"]);
    const busy = new Replica(repository.path, own.url, ["--exit-timeout-secs", "1"]);
    let step: Promise<{ status: number; text: string }> | undefined;
    try {
      await Promise.all([idle.ready(), busy.ready()]);
      assert.equal(sum(await add(idle, 1, { id: 901, start: true })), 1);
      assert.equal(sum(await add(busy, 1, { id: 902, start: true, step: 1 })), 1);
      own.pause();
      step = inferText(busy, MODEL, 1, { id: 902, step: 2 }).catch((error: unknown) => ({
        status: 0,
        text: String(error),
      }));
      // The step has run in the model: its write is what waits.
      const executions = async (): Promise<number> => {
        const stats = (await getJson(`${busy.url}/v2/models/${MODEL}/stats`)).body.model_stats as {
          execution_count: number;
        }[];
        return stats[0]!.execution_count;
      };
      for (let tries = 0; (await executions()) < 2 && tries < 200; tries++) await pause(10);
      idle.process.child.kill("SIGTERM");
      busy.process.child.kill("SIGTERM");
      const within = async (replica: Replica, ms: number) => {
        let timer: NodeJS.Timeout | undefined;
        const limit = new Promise<undefined>((resolve) => {
          timer = setTimeout(() => resolve(undefined), ms);
        });
        try {
          return await Promise.race([replica.process.exit, limit]);
        } finally {
          clearTimeout(timer);
        }
      };
      const [idleExit, busyExit] = await Promise.all([within(idle, 5000), within(busy, 5000)]);
      assert.ok(idleExit !== undefined, "with nothing to write, the replica exits within 5 s of SIGTERM");
      assert.equal(idleExit.code, 0, idleExit.stderr);
      assert.ok(busyExit !== undefined, "with a write waiting, the replica exits within 5 s of SIGTERM");
      // The write it waited for was cut short: its exit fails, as Triton's does at its exit timeout.
      assert.equal(busyExit.code, 1, busyExit.stderr);
      // The step whose write was not answered is told it may have been applied, and to
      // retry it numbered (it is applied once), as 504, which no client retries unasked.
      const answer = await step;
      assert.equal(answer.status, 504, answer.text);
      assert.match(
        answer.text,
        /in the state store at .* was not confirmed .*: the step may have been applied, .*retry it with its sequence_step/,
      );
    } finally {
      own.resume();
      await Promise.all([idle.kill(), busy.kill()]);
      await step;
      await own.stop();
    }
  });

  it("a START of an id that ended elsewhere begins it anew on a replica that held an older copy", async () => {
    const id = 602;
    assert.equal(sum(await add(a, 5, { id, start: true, step: 1 })), 5);
    assert.equal(sum(await add(b, 1, { id, step: 2 })), 6);
    assert.equal(sum(await add(a, 1, { id, step: 3, end: true })), 7);
    // Replica b still holds steps 1–2 of the old life. The new life's START is not taken
    // for a retry of the old one's (whose answer was 5): b tells the client to send it
    // again, and then starts the id anew.
    const first = await add(b, 50, { id, start: true, step: 1 });
    assert.equal(first.status, 503, JSON.stringify(first.body));
    assert.match(first.body.error as string, /send the START again/);
    assert.equal(sum(await add(b, 50, { id, start: true, step: 1 })), 50);
    assert.equal(sum(await add(b, 1, { id, step: 2 })), 51);
    assert.equal(sum(await add(a, 1, { id, step: 3, end: true })), 52);
  });

  it("an OpenVINO-style START of an id that ended elsewhere is not refused as existing by a replica that held an older copy", async () => {
    const predict = async (replica: Replica, value: number, control?: 1 | 2, id = 603) => {
      const answer = await postJson(`${replica.url}/v1/models/${MODEL}:predict`, {
        inputs: {
          INPUT: [[value]],
          sequence_id: [id],
          ...(control === undefined ? {} : { sequence_control_input: [control] }),
        },
      });
      return answer.status === 200
        ? (answer.body.outputs as { OUTPUT: number[][] }).OUTPUT[0]![0]
        : `${answer.status} ${JSON.stringify(answer.body)}`;
    };
    assert.equal(await predict(a, 5, 1), 5);
    assert.equal(await predict(b, 1), 6);
    assert.equal(await predict(a, 1, 2), 7);
    // Ended, the id may start again, on b too, although b still holds the old life.
    assert.equal(await predict(b, 50, 1), 50);
    assert.equal(await predict(a, 1, 2), 51);
    // A step for it on b, whose copy is behind, is OVMS's 404, as on one server.
    assert.match(String(await predict(b, 1)), /^404 .*Sequence with provided ID does not exist/);

    // A START refused as existing leaves b a copy read from the tier; that read does not
    // vouch for a later numbered START, which must not be taken for the old life's retry.
    const id = 604;
    assert.equal(sum(await add(a, 5, { id, start: true, step: 1 })), 5);
    assert.equal(sum(await add(a, 1, { id, step: 2 })), 6);
    assert.match(String(await predict(b, 100, 1, id)), /^409 .*already exists/);
    assert.equal(sum(await add(a, 1, { id, step: 3, end: true })), 7);
    const first = await add(b, 50, { id, start: true, step: 1 });
    assert.equal(first.status, 503, JSON.stringify(first.body));
    assert.equal(sum(await add(b, 50, { id, start: true, step: 1 })), 50);
    assert.equal(sum(await add(b, 1, { id, step: 2, end: true })), 51);
  });

  it("an operator's end while the store is down is answered 503, and the replica serves on", async () => {
    const own = await RedisServer.start();
    const replica = new Replica(repository.path, own.url);
    try {
      await replica.ready();
      assert.equal(sum(await add(replica, 5, { id: 605, start: true })), 5);
      await own.stop();
      // The end waits for the store; it cannot be written, and the operator is told so.
      const ended = await deleteJson(`${replica.url}/v2/models/${MODEL}/sequences/605`);
      assert.equal(ended.status, 503, JSON.stringify(ended.body));
      // In words the operator can act on, not the Redis client's ("maxRetriesPerRequest").
      assert.match(
        ended.body.error as string,
        /in the state store at \S+ failed \((it could not be reached: the connection was lost and reconnecting failed|the connection to it is closed)\); retry the request$/,
      );
      const live = await fetch(`${replica.url}/v2/health/live`);
      assert.equal(live.status, 200);
      assert.equal(replica.process.child.exitCode, null);
    } finally {
      await replica.stop();
    }
  });

  it("a model loaded again on one replica keeps its sequences' place in the tier: a step made elsewhere meanwhile is kept", async () => {
    const explicit = ["--model-control-mode", "explicit", "--load-model", MODEL];
    const [one, two] = (await startReplicas(repository.path, redis.url, [explicit, explicit])) as [
      Replica,
      Replica,
    ];
    try {
      const id = 601;
      assert.equal(sum(await add(one, 5, { id, start: true })), 5);
      assert.equal(sum(await add(two, 1, { id })), 6);
      // The same version again: its sequences move to the new load, and so does their place.
      const loaded = await postJson(`${two.url}/v2/repository/models/${MODEL}/load`, {});
      assert.equal(loaded.status, 200, JSON.stringify(loaded.body));
      assert.equal(sum(await add(one, 10, { id })), 16);
      // Replica two's copy is behind: it reads the tier again rather than overwrite one's step.
      assert.equal(sum(await add(two, 100, { id })), 116);
      assert.equal(sum(await add(one, 0, { id, end: true })), 116);
    } finally {
      await stopReplicas([one, two]);
    }
  });

  it("a sequence started with one API key is that key's alone on every replica", async () => {
    const dir = mkdtempSync(join(tmpdir(), "seqserve-keys-"));
    const keys = join(dir, "keys");
    const tenantA = "tenant-a-0123456789abcdef";
    const tenantB = "tenant-b-0123456789abcdef";
    writeFileSync(keys, `tenant-a inference ${tenantA}\ntenant-b inference ${tenantB}\n`);
    const withKeys = ["--api-keys-file", keys];
    const [one, two] = (await startReplicas(repository.path, redis.url, [withKeys, withKeys])) as [
      Replica,
      Replica,
    ];
    try {
      const step = async (replica: Replica, key: string, value: number, sequence: SequenceParams) => {
        const response = await fetch(`${replica.url}/v2/models/${MODEL}/infer`, {
          method: "POST",
          headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
          body: inferBody(int32Input(value), sequence),
        });
        return {
          status: response.status,
          headers: {},
          body: (await response.json()) as Record<string, unknown>,
        };
      };
      const id = 501;
      assert.equal(sum(await step(one, tenantA, 5, { id, start: true })), 5);
      // Another tenant, on the replica that does not hold it: refused, and nothing changes.
      const stranger = await step(two, tenantB, 100, { id });
      assert.equal(stranger.status, 403, JSON.stringify(stranger.body));
      const ending = await step(two, tenantB, 0, { id, end: true });
      assert.equal(ending.status, 403, JSON.stringify(ending.body));
      // Nor may it START the id again there, as it may not on one server.
      const restart = await step(two, tenantB, 100, { id, start: true });
      assert.equal(restart.status, 403, JSON.stringify(restart.body));
      // Its owner goes on, on either replica, from its own state.
      assert.equal(sum(await step(two, tenantA, 1, { id })), 6);
      assert.equal(sum(await step(one, tenantA, 1, { id, end: true })), 7);

      // Ended, the id is free: the other tenant starts it anew on replica one. Replica two
      // still holds tenant A's old copy, which must not take tenant B's new life as its own.
      assert.equal(sum(await step(one, tenantB, 100, { id, start: true })), 100);
      const stale = await step(two, tenantA, 1, { id });
      assert.equal(stale.status, 403, JSON.stringify(stale.body));
      assert.equal(sum(await step(two, tenantB, 1, { id })), 101);
      assert.equal(sum(await step(one, tenantB, 1, { id, end: true })), 102);

      // Nor may tenant A START the id again through its old copy on replica two: a START
      // of the new life's id there is judged on the new life, not on the old copy.
      const again = 502;
      assert.equal(sum(await step(one, tenantA, 5, { id: again, start: true })), 5);
      assert.equal(sum(await step(two, tenantA, 1, { id: again })), 6);
      assert.equal(sum(await step(one, tenantA, 1, { id: again, end: true })), 7);
      assert.equal(sum(await step(one, tenantB, 100, { id: again, start: true })), 100);
      const takeBack = await step(two, tenantA, 1000, { id: again, start: true });
      assert.equal(takeBack.status, 403, JSON.stringify(takeBack.body));
      assert.equal(sum(await step(one, tenantB, 1, { id: again, end: true })), 101);

      // A copy read from the tier for a START that was refused does not vouch for a later
      // request: tenant A's new life's numbered START is not taken for a retry of the old.
      const numbered = 503;
      assert.equal(sum(await step(one, tenantA, 5, { id: numbered, start: true, step: 1 })), 5);
      assert.equal(sum(await step(one, tenantA, 1, { id: numbered, step: 2 })), 6);
      const refused = await step(two, tenantB, 100, { id: numbered, start: true });
      assert.equal(refused.status, 403, JSON.stringify(refused.body));
      assert.equal(sum(await step(one, tenantA, 1, { id: numbered, step: 3, end: true })), 7);
      // The record of its end answers its owner's retry of the END, and nobody else's.
      const peek = await step(one, tenantB, 1, { id: numbered, step: 3, end: true });
      assert.equal(peek.status, 403, JSON.stringify(peek.body));
      assert.equal(sum(await step(two, tenantA, 1, { id: numbered, step: 3, end: true })), 7);
      assert.equal(sum(await step(two, tenantA, 50, { id: numbered, start: true, step: 1 })), 50);
      assert.equal(sum(await step(two, tenantA, 1, { id: numbered, step: 2, end: true })), 51);
    } finally {
      await stopReplicas([one, two]);
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("requests waiting for the store are bounded by the model's slots and backlog; the rest are told to retry", async () => {
    // 2 slots and a backlog of 1: at most 3 requests wait for Redis at once.
    const small = tempRepository({
      small: {
        config: accumulatorConfig(
          "small",
          2,
          "max_sequence_idle_microseconds: 60000000\n  oldest { max_candidate_sequences: 2 }",
          'parameters [ { key: "sequence_backlog_limit" value: { string_value: "1" } } ]',
        ),
        onnx: accumulatorModel(),
      },
    });
    const replica = new Replica(small.path, redis.url);
    try {
      await replica.ready();
      redis.pause();
      let answers: HttpAnswer[];
      try {
        // Steps of sequences this replica does not hold: each waits for the store's record.
        const waiting = [601, 602, 603].map((id) => infer(replica.url, "small", int32Input(1), { id }));
        await pause(200);
        const refused = await infer(replica.url, "small", int32Input(1), { id: 604 });
        assert.equal(refused.status, 503, JSON.stringify(refused.body));
        assert.match(
          refused.body.error as string,
          /model 'small' has 3 requests waiting for the state store at redis:\/\/127\.0\.0\.1:\d+; retry later/,
        );
        redis.resume();
        answers = await Promise.all(waiting);
      } finally {
        redis.resume();
      }
      // Once the store answers, the waiting ones are admitted as usual: unknown sequences.
      for (const answer of answers) {
        assert.equal(answer.status, 400, JSON.stringify(answer.body));
        assert.match(answer.body.error as string, /must specify the START flag/);
      }
      assert.equal(sum(await infer(replica.url, "small", int32Input(7), { id: 605, start: true })), 7);
    } finally {
      await replica.stop();
      small.remove();
    }
  });

  it("a SageMaker session opened on one replica goes on, and is closed, on the other (the AWS SDK)", async () => {
    const onA = sdkClient(a.sagemakerPort);
    const onB = sdkClient(b.sagemakerPort);
    try {
      const session = await openSession(onA, SECOND);
      // No TargetModel: each replica finds which model holds the session, live here or in the tier.
      let total = 0;
      for (let step = 1; step <= 6; step++) {
        const answer = await invoke(step % 2 === 0 ? onA : onB, {
          body: JSON.stringify([step]),
          sessionId: session.id,
        });
        total += step;
        assert.equal((jsonAnswer(answer) as number[][])[0]![0], total, `step ${step}`);
      }
      const closed = await closeSession(onB, session.id);
      assert.equal(closed.ClosedSessionId, session.id);
      // A still holds the session as it was before the close: the tier's end is what counts.
      const error = await sdkError(invoke(onA, { body: JSON.stringify([1]), sessionId: session.id }));
      assert.equal(error.originalStatus, 400);
      assert.match(containerMessage(error), new RegExp(`^session '${session.id}' is closed`));
    } finally {
      onA.destroy();
      onB.destroy();
    }
  });

  it("a SageMaker session through the shipped nginx configuration: ping, open, steps, close (the AWS SDK)", async () => {
    const nginx = await Nginx.start([a.ports, b.ports]);
    const client = sdkClient(nginx.sagemakerPort);
    try {
      assert.equal((await fetch(`http://127.0.0.1:${nginx.sagemakerPort}/ping`)).status, 200);
      const session = await openSession(client, SECOND);
      let total = 0;
      for (let step = 1; step <= 4; step++) {
        const answer = await invoke(client, { body: JSON.stringify([step]), sessionId: session.id });
        total += step;
        assert.equal((jsonAnswer(answer) as number[][])[0]![0], total, `step ${step}`);
      }
      assert.equal((await closeSession(client, session.id)).ClosedSessionId, session.id);
    } finally {
      client.destroy();
      await nginx.stop();
    }
  });

  it("a SageMaker CLOSE numbered with sequence_step, retried on either replica, gets its recorded answer (the AWS SDK)", async () => {
    const onA = sdkClient(a.sagemakerPort);
    const onB = sdkClient(b.sagemakerPort);
    try {
      const opened = await invoke(onA, {
        body: JSON.stringify([5]),
        sessionId: "NEW_SESSION",
        targetModel: MODEL,
        customAttributes: "sequence_step=1",
      });
      const { id } = newSession(opened);
      const second = await invoke(onB, {
        body: JSON.stringify([3]),
        sessionId: id,
        customAttributes: "sequence_step=2",
      });
      assert.deepEqual(jsonAnswer(second), [[8]]);
      const close = {
        body: JSON.stringify({
          requestType: "CLOSE",
          inputs: [{ name: "INPUT", datatype: "INT32", shape: [1, 1], data: [10] }],
        }),
        sessionId: id,
        customAttributes: "sequence_step=3",
      };
      const closed = await invoke(onA, close);
      assert.equal(closed.ClosedSessionId, id);
      const answer = jsonAnswer(closed) as { outputs: { data: number[] }[] };
      assert.deepEqual(answer.outputs[0]!.data, [18]);
      // Its answer lost, the client retries, wherever the balancer sends it: the close is
      // not applied again, and the retry is answered as the close was.
      for (const [replica, client] of [
        ["A", onA],
        ["B", onB],
      ] as const) {
        const retried = await invoke(client, close);
        assert.equal(retried.ClosedSessionId, id, `on ${replica}`);
        assert.deepEqual(jsonAnswer(retried), answer, `on ${replica}`);
      }
      // Unnumbered, or numbered past the close: the session is closed.
      for (const customAttributes of [undefined, "sequence_step=4"]) {
        const { customAttributes: _, ...unnumbered } = close;
        const error = await sdkError(
          invoke(onB, customAttributes === undefined ? unnumbered : { ...close, customAttributes }),
        );
        assert.equal(error.originalStatus, 400, customAttributes);
        assert.match(containerMessage(error), new RegExp(`^session '${id}' is closed`), customAttributes);
      }
    } finally {
      onA.destroy();
      onB.destroy();
    }
  });
});
