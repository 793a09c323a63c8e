import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { accumulatorModel, growingStateConfig, growingStateModel } from "../../tools/onnx/sequence-models.ts";
import { infer, type JsonInput, outputData } from "../support/http-client.ts";
import {
  ACCUMULATOR_CONTROLS,
  accumulate,
  accumulatorConfig,
  batchCounts,
  directBatchSizes,
  listSequences,
  waitForSequence,
} from "../support/sequence-kit.ts";
import { startTestServer, type TestServer } from "../support/test-server.ts";

// Direct-strategy batching as Triton's L0_sequence_batcher checks it, through the
// per-batch-size execution counts of /stats: a sequence owns a slot, slot i is batch row
// i, a batch spans rows up to its highest busy slot (idle slots are READY=0 padding), and
// requests whose inputs or states differ in shape never share a batch.
//
// Batching is made deterministic with minimum_slot_utilization and a long queue delay: a
// batch waits until that share of the slots has a request. Slots come from the sequences
// API, so each expected count is computed from where the sequences actually sit.

const LONG = "max_queue_delay_microseconds: 30000000";
const IDLE = "max_sequence_idle_microseconds: 60000000";
const direct = (utilization: number, delay = LONG) =>
  `${IDLE}\n  direct { ${delay} minimum_slot_utilization: ${utilization} }`;

const WIDTH_CONFIG = `
name: "widths"
backend: "onnxruntime"
max_batch_size: 4
input [ { name: "INPUT" data_type: TYPE_INT32 dims: [ -1 ] } ]
output [ { name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
sequence_batching {
  ${direct(0.5)}
  ${ACCUMULATOR_CONTROLS}
}
instance_group [ { count: 1 kind: KIND_CPU } ]
`;

const GROWING_CONFIG = growingStateConfig(direct(0.5));

let server: TestServer;
before(async () => {
  const acc = (name: string, batching: string) => ({
    config: accumulatorConfig(name, 4, batching),
    onnx: accumulatorModel(),
  });
  server = await startTestServer({
    half: acc("half", direct(0.5)),
    full: acc("full", direct(1)),
    // Utilization 1 makes the four-sequence rounds deterministic; once two sequences are
    // left their batches leave when this (shorter) delay runs out.
    skip: acc("skip", direct(1, "max_queue_delay_microseconds: 1500000")),
    widths: { config: WIDTH_CONFIG, onnx: accumulatorModel({ variableWidth: true }) },
    growing: { config: GROWING_CONFIG, onnx: growingStateModel() },
  });
});
after(() => server.stop());

/** Slot of each id, read from the sequences API. */
async function slotsOf(model: string, ids: readonly number[]): Promise<number[]> {
  const { sequences } = await listSequences(server.url, model);
  return ids.map((id) => {
    const entry = sequences.find((s) => s.id === BigInt(id));
    assert.ok(entry !== undefined && entry.slot !== null, `sequence ${id} has no slot`);
    return entry.slot;
  });
}

/** Runs the sequences side by side, one request each per round; returns every OUTPUT. */
async function rounds(
  model: string,
  sequences: Record<number, readonly number[]>,
): Promise<Record<number, number[]>> {
  const ids = Object.keys(sequences).map(Number);
  const outputs: Record<number, number[]> = Object.fromEntries(ids.map((id) => [id, []]));
  await Promise.all(
    ids.map(async (id) => {
      const values = sequences[id]!;
      for (let step = 0; step < values.length; step++) {
        const flags = { id, start: step === 0, end: step === values.length - 1 };
        outputs[id]!.push(await accumulate(server.url, model, values[step]!, flags));
      }
    }),
  );
  return outputs;
}

const prefixSums = (values: readonly number[]) =>
  values.map((_, i) => values.slice(0, i + 1).reduce((a, b) => a + b, 0));

describe("Direct strategy batches", { timeout: 60_000 }, () => {
  it("half batch: 2 sequences x 4 requests on 4 slots run as 4 executions of batch size 2", async () => {
    const sequences = { 11: [1, 2, 3, 4], 12: [10, 20, 30, 40] };
    const starts = Object.keys(sequences).map(Number);
    const run = rounds("half", sequences);
    // Both are listed with their slots before their first batch can leave.
    const slots = await Promise.all(
      starts.map((id) => waitForSequence(server.url, "half", id).then((s) => s.slot!)),
    );
    const outputs = await run;
    assert.deepEqual(outputs, { 11: prefixSums(sequences[11]), 12: prefixSums(sequences[12]) });
    assert.deepEqual(slots.sort(), [0, 1]);
    assert.deepEqual(await batchCounts(server.url, "half"), directBatchSizes([slots, slots, slots, slots]));
    assert.deepEqual(await batchCounts(server.url, "half"), { 2: 4 });
  });

  it("full batch: 4 sequences x 3 requests on 4 slots run as 3 executions of batch size 4", async () => {
    const sequences = { 21: [1, 1, 1], 22: [2, 2, 2], 23: [3, 3, 3], 24: [4, 4, 4] };
    const outputs = await rounds("full", sequences);
    for (const [id, values] of Object.entries(sequences))
      assert.deepEqual(outputs[Number(id)], prefixSums(values));
    assert.deepEqual(await batchCounts(server.url, "full"), { 4: 3 });
  });

  it("skip batch: once short sequences end, the long ones' batches span to their highest slot with padding", async () => {
    // Slots are handed out in arrival order: start the sequences one at a time (each
    // listed before the next is sent) so that the short ones hold slots 0 and 2.
    const plan: [number, number[]][] = [
      [31, [1, 2]],
      [32, [10, 20, 30, 40]],
      [33, [100, 200]],
      [34, [1000, 2000, 3000, 4000]],
    ];
    const starts: Promise<number>[] = [];
    for (const [id, values] of plan) {
      starts.push(accumulate(server.url, "skip", values[0]!, { id, start: true }));
      await waitForSequence(server.url, "skip", id);
    }
    const firsts = await Promise.all(starts);
    const [a, b, c, d] = await slotsOf(
      "skip",
      plan.map(([id]) => id),
    );
    assert.deepEqual([a, b, c, d], [0, 1, 2, 3]);
    const rest = await Promise.all(
      plan.map(async ([id, values]) => {
        const out: number[] = [];
        for (let step = 1; step < values.length; step++) {
          const end = step === values.length - 1;
          out.push(await accumulate(server.url, "skip", values[step]!, { id, end }));
        }
        return out;
      }),
    );
    assert.deepEqual(
      plan.map((_, i) => [firsts[i], ...rest[i]!]),
      [
        [1, 3],
        [10, 30, 60, 100],
        [100, 300],
        [1000, 3000, 6000, 10000],
      ],
    );
    // Two rounds of all four, then two rounds of the long ones alone, padded up to slot 3.
    const expected = directBatchSizes([
      [a!, b!, c!, d!],
      [a!, b!, c!, d!],
      [b!, d!],
      [b!, d!],
    ]);
    assert.deepEqual(expected, { 4: 4 });
    assert.deepEqual(await batchCounts(server.url, "skip"), expected);
  });

  it("never batches requests whose inputs differ in shape", async () => {
    // Two sequences send rows of 2 values, two send rows of 3; every round has all four.
    const plan: Record<number, number[][]> = {
      41: [
        [1, 1],
        [2, 2],
        [3, 3],
      ],
      42: [
        [1, 2, 3],
        [4, 5, 6],
        [7, 8, 9],
      ],
      43: [
        [10, 10],
        [20, 20],
        [30, 30],
      ],
      44: [
        [100, 0, 0],
        [0, 100, 0],
        [0, 0, 100],
      ],
    };
    const ids = Object.keys(plan).map(Number);
    const step = async (id: number, index: number): Promise<number> => {
      const values = plan[id]![index]!;
      const input: JsonInput[] = [
        { name: "INPUT", datatype: "INT32", shape: [1, values.length], data: values },
      ];
      const flags = { id, start: index === 0, end: index === plan[id]!.length - 1 };
      return outputData(await infer(server.url, "widths", input, flags), "OUTPUT")[0] as number;
    };
    const outputs: number[][] = [await Promise.all(ids.map((id) => step(id, 0)))];
    const [s41, s42, s43, s44] = await slotsOf("widths", ids);
    for (let index = 1; index < 3; index++) outputs.push(await Promise.all(ids.map((id) => step(id, index))));
    assert.deepEqual(outputs, [
      [2, 6, 20, 100],
      [6, 21, 60, 200],
      [12, 45, 120, 300],
    ]);
    // Each round is one batch per shape: 41 with 43, 42 with 44.
    const narrow = [s41!, s43!];
    const wide = [s42!, s44!];
    const expected = directBatchSizes([narrow, wide, narrow, wide, narrow, wide]);
    assert.deepEqual(await batchCounts(server.url, "widths"), expected);
  });

  it("never batches sequences whose states differ in shape (a growing cache)", async () => {
    const step = async (id: number, value: number, flags: { start?: boolean; end?: boolean } = {}) => {
      const answer = await infer(
        server.url,
        "growing",
        [{ name: "INPUT", datatype: "FP32", shape: [1, 1], data: [value] }],
        { id, ...flags },
      );
      return [outputData(answer, "OUTPUT")[0], outputData(answer, "LENGTH")[0]];
    };
    // 51 and 52 take two steps together: their caches are 3 columns wide (1 initial + 2).
    const first = await Promise.all([
      (async () => [await step(51, 1, { start: true }), await step(51, 2)])(),
      (async () => [await step(52, 10, { start: true }), await step(52, 20)])(),
    ]);
    assert.deepEqual(first, [
      [
        [1, 2],
        [3, 3],
      ],
      [
        [10, 2],
        [30, 3],
      ],
    ]);
    // 53 and 54 start; from now on every round has all four, at two cache widths.
    const second = await Promise.all([
      step(51, 3),
      step(52, 30),
      step(53, 5, { start: true }),
      step(54, 7, { start: true }),
    ]);
    assert.deepEqual(second, [
      [6, 4],
      [60, 4],
      [5, 2],
      [7, 2],
    ]);
    const [s51, s52, s53, s54] = await slotsOf("growing", [51, 52, 53, 54]);
    const third = await Promise.all([
      step(51, 4, { end: true }),
      step(52, 40, { end: true }),
      step(53, 5, { end: true }),
      step(54, 7, { end: true }),
    ]);
    assert.deepEqual(third, [
      [10, 5],
      [100, 5],
      [10, 3],
      [14, 3],
    ]);
    const old = [s51!, s52!];
    const young = [s53!, s54!];
    const expected = directBatchSizes([old, old, old, young, old, young]);
    assert.deepEqual(await batchCounts(server.url, "growing"), expected);
  });
});
