import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import type { TierWrite } from "../../src/core/sequence/sequence-tier.ts";
import { parseRedisLocation } from "../../src/state-tiers/redis/redis-location.ts";
import { RedisSequenceTier } from "../../src/state-tiers/redis/redis-sequence-tier.ts";
import { type HandlerRepository, handlerRepository } from "../handlers/support/handler-kit.ts";
import { type HttpAnswer, infer, outputData, type SequenceParams } from "../support/http-client.ts";
import { missingTools, RedisServer, type Replica, SharedStoreCluster } from "./support/scale-kit.ts";

// A START that failed in its model on one replica (its handler did not answer within its
// handler_timeout_ms) left that replica a live copy of the sequence with no step applied
// and nothing in the state store. When the client then started the id on the other
// replica and came back with a step, the first replica ran the step on its empty copy
// without asking the store, and wrote it over the other replica's record, unfenced: the
// step's answer was wrong, and every step the other replica had answered was lost (with
// sequence_step, the step was refused: "the sequence has applied 0 steps").

const skip = missingTools(["redis-server", "redis-cli"]);

const TIMEOUT_MS = 300;

/** Sums the VALUEs of its sequence (SUM); a VALUE of 5 sleeps past handler_timeout_ms, not heeding its signal. */
const SUM_MODEL = {
  config: `
backend: "typescript"
max_batch_size: 0
input [ { name: "VALUE" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "SUM" data_type: TYPE_INT32 dims: [ 1 ] } ]
sequence_batching {
  max_sequence_idle_microseconds: 60000000
  oldest { max_candidate_sequences: 4 }
}
parameters { key: "handler_timeout_ms" value { string_value: "${TIMEOUT_MS}" } }
`,
  files: {
    "1/model.ts": `
export default {
  async execute(requests: any[]) {
    return Promise.all(requests.map(async (request: any) => {
      const value = request.inputs.VALUE.data[0];
      if (value === 5) await new Promise((resolve) => setTimeout(resolve, ${TIMEOUT_MS + 120}));
      const state = request.sequence.state;
      const sum = (state.get("sum")?.data[0] ?? 0) + value;
      state.set("sum", { datatype: "INT32", shape: [1], data: Int32Array.of(sum) });
      return { outputs: { SUM: { datatype: "INT32", shape: [1], data: Int32Array.of(sum) } } };
    }));
  },
};
`,
  },
};

describe("a START that failed in its model on one replica, then began on another", { skip }, () => {
  let repository: HandlerRepository;
  let cluster: SharedStoreCluster;
  let c: Replica;
  let d: Replica;

  before(async () => {
    repository = handlerRepository({ sum: SUM_MODEL });
    cluster = await SharedStoreCluster.start(repository.path, [[], []]);
    [c, d] = cluster.replicas as [Replica, Replica];
  });

  after(async () => {
    await cluster?.stop();
    repository?.remove();
  });

  const add = (replica: Replica, value: number, sequence: SequenceParams): Promise<HttpAnswer> =>
    infer(replica.url, "sum", [{ name: "VALUE", datatype: "INT32", shape: [1], data: [value] }], sequence);
  const sum = (answer: HttpAnswer): number => outputData(answer, "SUM")[0] as number;
  const failedStart = async (id: number, step?: number): Promise<void> => {
    const answer = await add(d, 5, { id, start: true, ...(step === undefined ? {} : { step }) });
    assert.equal(answer.status, 503, JSON.stringify(answer.body));
    assert.match(JSON.stringify(answer.body), new RegExp(`within ${TIMEOUT_MS} ms`));
  };

  it("goes on from the other replica's record, and loses none of its steps", async () => {
    const id = 9900003;
    await failedStart(id);
    assert.equal(sum(await add(c, 1, { id, start: true })), 1);
    assert.equal(sum(await add(c, 10, { id })), 11);
    assert.equal(sum(await add(d, 100, { id })), 111);
    assert.equal(sum(await add(c, 1000, { id })), 1111);
    assert.equal(sum(await add(d, 10000, { id, end: true })), 11111);
  });

  it("with numbered steps, too", async () => {
    const id = 9900004;
    await failedStart(id, 1);
    assert.equal(sum(await add(c, 1, { id, start: true, step: 1 })), 1);
    assert.equal(sum(await add(c, 10, { id, step: 2 })), 11);
    assert.equal(sum(await add(d, 100, { id, step: 3 })), 111);
    // The retry of a step is answered from its record, wherever it lands.
    assert.equal(sum(await add(c, 100, { id, step: 3 })), 111);
    assert.equal(sum(await add(c, 1000, { id, step: 4 })), 1111);
    assert.equal(sum(await add(d, 10000, { id, step: 5, end: true })), 11111);
  });

  it("alone, goes on from its empty state, as on one server", async () => {
    const id = 9900005;
    await failedStart(id);
    assert.equal(sum(await add(d, 100, { id })), 100);
    assert.equal(sum(await add(c, 1000, { id })), 1100);
    assert.equal(sum(await add(d, 10000, { id, end: true })), 11100);
  });
});

describe("the tier's create: the first write of a life whose START wrote nothing", { skip }, () => {
  it("never replaces a live record of another life; replaces nothing else", async () => {
    const redis = await RedisServer.start();
    const tier = await RedisSequenceTier.connect(parseRedisLocation(redis.url));
    try {
      const records = tier.forModel("m", "1");
      const write = (mode: TierWrite["mode"], life: string, endReason?: string): TierWrite => ({
        id: 7n,
        mode,
        life,
        body: Uint8Array.of(1),
        expiry: { kind: "idle", ms: 60_000 },
        ...(endReason === undefined ? {} : { endReason }),
      });
      // Nothing there: written.
      assert.deepEqual(await records.write([write("create", "d")]), [{ kind: "written", version: 1 }]);
      // Another life's START replaces it (a START restarts the id)…
      assert.deepEqual(await records.write([write("new", "c")]), [{ kind: "written", version: 2 }]);
      // …and a create or create_end does not replace that: the writer is given it.
      for (const mode of ["create", "create_end"] as const) {
        const [result] = await records.write([write(mode, "d", mode === "create_end" ? "end" : undefined)]);
        assert.equal(result?.kind, "conflict");
        assert.equal(result.kind === "conflict" ? result.current?.life : undefined, "c");
        assert.equal(result.kind === "conflict" ? result.current?.ended : "", undefined);
      }
      // An ended record is no live life: a create_end takes the id, ending at once.
      await records.write([{ ...write("end", "c", "end"), expect: { version: 2, life: "c" } }]);
      assert.deepEqual(await records.write([write("create_end", "d", "end")]), [
        { kind: "written", version: 4 },
      ]);
      const record = await records.read(7n);
      assert.equal(record?.life, "d");
      assert.equal(record?.ended, "end");
    } finally {
      await tier.close();
      await redis.stop();
    }
  });
});
