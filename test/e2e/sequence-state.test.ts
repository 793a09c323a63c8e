import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { stateEntryBytes } from "../../src/core/sequence/state-store.ts";
import { OnnxModelBuilder } from "../../tools/onnx/onnx-model-builder.ts";
import { accumulatorModel, scaledAccumulatorConfig } from "../../tools/onnx/sequence-models.ts";
import { type LogLine, memoryLogger } from "../security/support/memory-logger.ts";
import { infer, inferBinary, type JsonInput, outputData } from "../support/http-client.ts";
import {
  accumulate,
  accumulatorConfig,
  assertError,
  batchCounts,
  directBatchSizes,
  executionCount,
  findSequence,
  int32Input,
  listSequences,
  startFlagMessage,
} from "../support/sequence-kit.ts";
import { startTestServer, type TestServer } from "../support/test-server.ts";

// Implicit state, both ways a config declares it: Triton's `state` section (initial state
// from zeros or from a file in <model>/initial_state/, a state output the client may see
// when `output` lists it) and the ONNX stateful backend's `state_pairs` (the batch on axis
// 1 of a [2, batch, 4] state), with store_states_as_fp16 and infer_end_requests; and inputs
// shared by a whole batch (`shared_inputs`), which split batches by value.

const IDLE = "max_sequence_idle_microseconds: 60000000";
const WAIT_FOR_ALL = (slots: number) =>
  `direct { max_queue_delay_microseconds: 30000000 minimum_slot_utilization: ${slots} }`;

/** OUTPUT = STATE + INPUT, STATE_OUT = OUTPUT, INT32 [batch, 3]: no START control, so a start shows its initial state. */
function adderModel(): Uint8Array {
  return new OnnxModelBuilder({ opset: 17 })
    .input("INPUT", "INT32", ["batch", 3])
    .input("STATE", "INT32", ["batch", 3])
    .output("OUTPUT", "INT32", ["batch", 3])
    .output("STATE_OUT", "INT32", ["batch", 3])
    .node("Add", ["STATE", "INPUT"], ["OUTPUT"])
    .node("Identity", ["OUTPUT"], ["STATE_OUT"])
    .toBytes();
}

function adderConfig(name: string, initialState: string, outputs: string): string {
  return `
name: "${name}"
backend: "onnxruntime"
max_batch_size: 4
input [ { name: "INPUT" data_type: TYPE_INT32 dims: [ 3 ] } ]
output [ ${outputs} ]
sequence_batching {
  ${IDLE}
  state [ {
    input_name: "STATE" output_name: "STATE_OUT" data_type: TYPE_INT32 dims: [ 3 ]
    ${initialState}
  } ]
}
instance_group [ { count: 1 kind: KIND_CPU } ]
`;
}

const ADDER_OUTPUT = `{ name: "OUTPUT" data_type: TYPE_INT32 dims: [ 3 ] }`;
const STATE_OUTPUT = `{ name: "STATE_OUT" data_type: TYPE_INT32 dims: [ 3 ] }`;

/**
 * Two layers of state on axis 0, the batch on axis 1, as recurrent models keep it:
 * stateN = state + [1, 2] * INPUT (layer 0 adds INPUT, layer 1 twice INPUT); L0 and L1
 * are the new layers. INPUT FP32 [batch, 4]; state / stateN FP32 [2, batch, 4].
 */
function layeredStateModel(): Uint8Array {
  return new OnnxModelBuilder({ opset: 17 })
    .input("INPUT", "FP32", ["batch", 4])
    .input("state", "FP32", [2, "batch", 4])
    .output("L0", "FP32", ["batch", 4])
    .output("L1", "FP32", ["batch", 4])
    .output("stateN", "FP32", [2, "batch", 4])
    .initializer("axis0", "INT64", [1], [0])
    .initializer("scale", "FP32", [2, 1, 1], new Float32Array([1, 2]))
    .initializer("first", "INT64", [], [0])
    .initializer("second", "INT64", [], [1])
    .node("Unsqueeze", ["INPUT", "axis0"], ["step"])
    .node("Mul", ["step", "scale"], ["scaled"])
    .node("Add", ["state", "scaled"], ["stateN"])
    .node("Gather", ["stateN", "first"], ["L0"], { axis: 0 })
    .node("Gather", ["stateN", "second"], ["L1"], { axis: 0 })
    .toBytes();
}

function layeredConfig(name: string, extra: string): string {
  return `
name: "${name}"
backend: "onnxruntime"
max_batch_size: 2
input [ { name: "INPUT" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [
  { name: "L0" data_type: TYPE_FP32 dims: [ 4 ] },
  { name: "L1" data_type: TYPE_FP32 dims: [ 4 ] }
]
sequence_batching {
  ${IDLE}
  ${WAIT_FOR_ALL(1)}
}
parameters { key: "state_pairs" value { string_value: "<<<state, stateN>>>" } }
instance_group [ { count: 1 kind: KIND_CPU } ]
${extra}
`;
}

/**
 * A state that grows a column each step, while its config keeps it at [1] (Triton's QA
 * growable-memory model): STATE_OUT = Concat(STATE, INPUT) on the last axis, OUTPUT its
 * sum. Batched, INT32 [batch, n]; unbatched, [n].
 */
function growingStateModel(batched: boolean): Uint8Array {
  const dims = (...rest: (number | string)[]) => (batched ? ["batch", ...rest] : rest);
  return new OnnxModelBuilder({ opset: 17 })
    .input("INPUT", "INT32", dims(1))
    .input("STATE", "INT32", dims("s"))
    .output("OUTPUT", "INT32", dims(1))
    .output("STATE_OUT", "INT32", dims("s2"))
    .initializer("last", "INT64", [1], [batched ? 1 : 0])
    .node("Concat", ["STATE", "INPUT"], ["STATE_OUT"], { axis: batched ? 1 : 0 })
    .node("ReduceSum", ["STATE_OUT", "last"], ["OUTPUT"], { keepdims: 1 })
    .toBytes();
}

/** A grown STATE of `elements` INT32 values as held apart from the slab: its entry's key and overhead, and its data. */
const grownStateBytes = (elements: number) =>
  stateEntryBytes("STATE", { datatype: "INT32", shape: [0], data: new Int32Array(0) }) + 4 * elements;

const growingConfig = (name: string, maxBatchSize: number, fields = "") => `
name: "${name}"
backend: "onnxruntime"
max_batch_size: ${maxBatchSize}
input [ { name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
sequence_batching {
  ${IDLE}
  state [ { input_name: "STATE" output_name: "STATE_OUT" data_type: TYPE_INT32 dims: [ 1 ] initial_state: { data_type: TYPE_INT32 dims: [ 1 ] zero_data: true name: "zero" } ${fields} } ]
}
instance_group [ { count: 1 kind: KIND_CPU } ]`;

const SHARED_CONFIG = scaledAccumulatorConfig("shared", 4, `${IDLE}\n  ${WAIT_FOR_ALL(0.5)}`);

let server: TestServer;
const lines: LogLine[] = [];
before(async () => {
  server = await startTestServer(
    {
      init_zero: {
        config: adderConfig(
          "init_zero",
          `initial_state { data_type: TYPE_INT32 dims: [ 3 ] zero_data: true name: "zeros" }`,
          ADDER_OUTPUT,
        ),
        onnx: adderModel(),
      },
      init_file: {
        config: adderConfig(
          "init_file",
          `initial_state { data_type: TYPE_INT32 dims: [ 3 ] data_file: "start.bin" name: "start" }`,
          `${ADDER_OUTPUT}, ${STATE_OUTPUT}`,
        ),
        onnx: adderModel(),
        files: { "initial_state/start.bin": new Uint8Array(new Int32Array([1000, -2000, 3000]).buffer) },
      },
      init_file_long: {
        config: adderConfig(
          "init_file_long",
          `initial_state { data_type: TYPE_INT32 dims: [ 3 ] data_file: "long.bin" name: "start" }`,
          ADDER_OUTPUT,
        ),
        onnx: adderModel(),
        files: { "initial_state/long.bin": new Uint8Array(new Int32Array([7, 8, 9, 10, 11]).buffer) },
      },
      layers: { config: layeredConfig("layers", ""), onnx: layeredStateModel() },
      layers_fp16: {
        config: layeredConfig(
          "layers_fp16",
          `parameters { key: "store_states_as_fp16" value { string_value: "true" } }`,
        ),
        onnx: layeredStateModel(),
      },
      no_end_run: {
        config: accumulatorConfig(
          "no_end_run",
          4,
          IDLE,
          `parameters { key: "infer_end_requests" value { string_value: "0" } }`,
        ),
        onnx: accumulatorModel(),
      },
      shared: { config: SHARED_CONFIG, onnx: accumulatorModel({ scaled: true }) },
      growing: { config: growingConfig("growing", 4), onnx: growingStateModel(true) },
      // As Triton's growable-memory QA model declares its state.
      growing_nobatch: {
        config: growingConfig(
          "growing_nobatch",
          0,
          "use_growable_memory: true use_same_buffer_for_input_output: true",
        ),
        onnx: growingStateModel(false),
      },
      // Its state may grow to three INT32 values, held apart from the slab.
      growing_limited: {
        config: `${growingConfig("growing_limited", 0)}
parameters [ { key: "sequence_state_max_bytes" value: { string_value: "${grownStateBytes(3)}" } } ]`,
        onnx: growingStateModel(false),
      },
    },
    {},
    memoryLogger(lines),
  );
});
after(() => server.stop());

const row3 = (values: readonly number[]): JsonInput[] => [
  { name: "INPUT", datatype: "INT32", shape: [1, 3], data: values },
];

async function add3(model: string, values: readonly number[], sequence: Parameters<typeof infer>[3]) {
  const answer = await infer(server.url, model, row3(values), sequence);
  return answer;
}

/** Rounds a (normal, positive) number to the nearest FP16 value, ties to even: independent of the server's code. */
function roundToFloat16(value: number): number {
  const exponent = Math.floor(Math.log2(value));
  const ulp = 2 ** (exponent - 10);
  const units = value / ulp;
  const floor = Math.floor(units);
  const rest = units - floor;
  const rounded = rest > 0.5 || (rest === 0.5 && floor % 2 === 1) ? floor + 1 : floor;
  return rounded * ulp;
}

/** One step of a layered-state model through the binary extension: L0 and L1 as floats. */
async function layerStep(
  model: string,
  input: readonly number[],
  sequence: { id: number; start?: boolean; end?: boolean },
): Promise<{ l0: Float32Array; l1: Float32Array }> {
  const answer = await inferBinary(
    server.url,
    model,
    [{ name: "INPUT", datatype: "FP32", shape: [1, 4], data: Float32Array.from(input) }],
    sequence,
  );
  assert.equal(answer.status, 200, answer.error);
  const floats = (name: string) => {
    const raw = answer.outputs.get(name)!;
    return new Float32Array(raw.buffer.slice(raw.byteOffset, raw.byteOffset + raw.byteLength));
  };
  return { l0: floats("L0"), l1: floats("L1") };
}

/** Runs two sequences side by side through a layered model (both rows in each batch). */
async function runLayers(model: string, inputs: Record<number, number[][]>) {
  const results: Record<number, { l0: Float32Array; l1: Float32Array }[]> = {};
  await Promise.all(
    Object.entries(inputs).map(async ([key, steps]) => {
      const id = Number(key);
      results[id] = [];
      for (let i = 0; i < steps.length; i++) {
        results[id]!.push(
          await layerStep(model, steps[i]!, { id, start: i === 0, end: i === steps.length - 1 }),
        );
      }
    }),
  );
  return results;
}

const LAYER_INPUTS: Record<number, number[][]> = {
  1: [
    [0.1, 0.2, 0.3, 0.4],
    [1 / 3, 2 / 3, 0.7, 1.1],
    [3.3, 0.01, 0.05, 2.5],
  ],
  2: [
    [10.1, 20.2, 30.3, 40.4],
    [-0.5, 0.25, 7.77, 1 / 7],
    [0.9, 0.8, 0.7, 0.6],
  ],
};

describe("implicit state and shared inputs", { timeout: 60_000 }, () => {
  it("state section with initial_state zero_data: each start, in any slot, begins from zeros", async () => {
    assert.deepEqual(
      outputData(await add3("init_zero", [1, 2, 3], { id: 1, start: true }), "OUTPUT"),
      [1, 2, 3],
    );
    assert.deepEqual(outputData(await add3("init_zero", [1, 2, 3], { id: 1 }), "OUTPUT"), [2, 4, 6]);
    const slot = (await findSequence(server.url, "init_zero", 1))?.slot;
    assert.equal((await findSequence(server.url, "init_zero", 1))?.stateBytes, 12);
    assert.deepEqual(
      outputData(await add3("init_zero", [1, 1, 1], { id: 1, end: true }), "OUTPUT"),
      [3, 5, 7],
    );
    // A new sequence takes the same slot and does not see the old state.
    assert.deepEqual(
      outputData(await add3("init_zero", [5, 5, 5], { id: 2, start: true }), "OUTPUT"),
      [5, 5, 5],
    );
    assert.equal((await findSequence(server.url, "init_zero", 2))?.slot, slot);
    // A restart begins from zeros again.
    assert.deepEqual(
      outputData(await add3("init_zero", [7, 8, 9], { id: 2, start: true }), "OUTPUT"),
      [7, 8, 9],
    );
    assert.deepEqual(
      outputData(await add3("init_zero", [0, 0, 1], { id: 2, end: true }), "OUTPUT"),
      [7, 8, 10],
    );
  });

  it("state section with initial_state data_file: a start begins from the file's values", async () => {
    const first = await add3("init_file", [1, 2, 3], { id: 1, start: true });
    assert.deepEqual(outputData(first, "OUTPUT"), [1001, -1998, 3003]);
    const second = await add3("init_file", [1, 1, 1], { id: 1 });
    assert.deepEqual(outputData(second, "OUTPUT"), [1002, -1997, 3004]);
    assert.deepEqual(
      outputData(await add3("init_file", [0, 0, 0], { id: 1, start: true, end: true }), "OUTPUT"),
      [1000, -2000, 3000],
    );
  });

  it("an initial_state data_file larger than the state loads, and a start begins from its first bytes, as in Triton", async () => {
    const first = await add3("init_file_long", [1, 2, 3], { id: 1, start: true });
    assert.deepEqual(outputData(first, "OUTPUT"), [8, 10, 12]);
    assert.deepEqual(
      outputData(await add3("init_file_long", [1, 1, 1], { id: 1, end: true }), "OUTPUT"),
      [9, 11, 13],
    );
  });

  it("a state output is visible to the client only when `output` lists it", async () => {
    const listed = await add3("init_file", [1, 2, 3], { id: 5, start: true, end: true });
    assert.deepEqual(
      (listed.body.outputs as { name: string }[]).map((o) => o.name),
      ["OUTPUT", "STATE_OUT"],
    );
    assert.deepEqual(outputData(listed, "STATE_OUT"), [1001, -1998, 3003]);
    const hidden = await add3("init_zero", [1, 2, 3], { id: 5, start: true });
    assert.deepEqual(
      (hidden.body.outputs as { name: string }[]).map((o) => o.name),
      ["OUTPUT"],
    );
    assertError(
      await infer(server.url, "init_zero", row3([1, 1, 1]), { id: 5, end: true }, ["STATE_OUT"]),
      400,
      "unexpected inference output 'STATE_OUT' for model 'init_zero'",
    );
    // The refused request did not end the sequence.
    assert.deepEqual(
      outputData(await add3("init_zero", [1, 1, 1], { id: 5, end: true }), "OUTPUT"),
      [2, 3, 4],
    );
  });

  it("state_pairs with the batch on axis 1: rows of one batch keep their own state, layer by layer", async () => {
    const results = await runLayers("layers", LAYER_INPUTS);
    for (const [key, steps] of Object.entries(LAYER_INPUTS)) {
      let l0 = [0, 0, 0, 0];
      let l1 = [0, 0, 0, 0];
      steps.forEach((input, step) => {
        l0 = l0.map((v, i) => Math.fround(v + Math.fround(input[i]!)));
        l1 = l1.map((v, i) => Math.fround(v + Math.fround(2 * Math.fround(input[i]!))));
        assert.deepEqual(results[Number(key)]![step], {
          l0: Float32Array.from(l0),
          l1: Float32Array.from(l1),
        });
      });
    }
    // Both sequences ran in every batch: 3 batches of 2 rows.
    assert.deepEqual(await batchCounts(server.url, "layers"), { 2: 3 });
  });

  it("state_pairs keeps [2, 1, 4] FP32 per sequence: 32 bytes", async () => {
    await Promise.all([
      layerStep("layers", [1, 1, 1, 1], { id: 11, start: true }),
      layerStep("layers", [2, 2, 2, 2], { id: 12, start: true }),
    ]);
    const { sequences, summary } = await listSequences(server.url, "layers");
    assert.deepEqual(
      sequences.map((s) => s.stateBytes),
      [32, 32],
    );
    assert.equal(summary.state_bytes, 64);
    await Promise.all([
      layerStep("layers", [1, 1, 1, 1], { id: 11, end: true }),
      layerStep("layers", [2, 2, 2, 2], { id: 12, end: true }),
    ]);
    assert.equal((await listSequences(server.url, "layers")).summary.state_bytes, 0);
  });

  it("store_states_as_fp16: state kept in half the bytes, results within FP16 precision", async () => {
    const results = await runLayers("layers_fp16", LAYER_INPUTS);
    const fromHalf = (v: number) => (v === 0 ? 0 : roundToFloat16(Math.abs(v)) * Math.sign(v));
    for (const [key, steps] of Object.entries(LAYER_INPUTS)) {
      // What the model computes when its state comes back from FP16 after every step...
      let l0 = [0, 0, 0, 0];
      let l1 = [0, 0, 0, 0];
      // ...and, independently, the exact sums with the most FP16 storage can lose (half an
      // FP16 unit of each stored value, 2^-11 relative).
      let exact = [0, 0, 0, 0];
      let bound = [0, 0, 0, 0];
      for (let step = 0; step < steps.length; step++) {
        const x = steps[step]!.map((v) => Math.fround(v));
        bound = bound.map((b, i) => b + Math.abs(l0[i]!) * 2 ** -11 + Math.abs(l0[i]!) * 2 ** -23);
        l0 = l0.map((v, i) => Math.fround(fromHalf(v) + x[i]!));
        l1 = l1.map((v, i) => Math.fround(fromHalf(v) + Math.fround(2 * x[i]!)));
        exact = exact.map((v, i) => v + x[i]!);
        const got = results[Number(key)]![step]!;
        assert.deepEqual(got, { l0: Float32Array.from(l0), l1: Float32Array.from(l1) });
        for (let i = 0; i < 4; i++) {
          const error = Math.abs(got.l0[i]! - exact[i]!);
          assert.ok(error <= bound[i]! + Math.abs(exact[i]!) * 2 ** -23, `L0[${i}] is off by ${error}`);
        }
      }
    }
    // A live sequence keeps 2 x 1 x 4 FP16 values: 16 bytes, half of FP32's 32.
    await Promise.all([
      layerStep("layers_fp16", [0.1, 0.2, 0.3, 0.4], { id: 21, start: true }),
      layerStep("layers_fp16", [0.1, 0.2, 0.3, 0.4], { id: 22, start: true }),
    ]);
    const { sequences, summary } = await listSequences(server.url, "layers_fp16");
    assert.deepEqual(
      sequences.map((s) => s.stateBytes),
      [16, 16],
    );
    assert.equal(summary.state_bytes, 32);
    await Promise.all([
      layerStep("layers_fp16", [0, 0, 0, 0], { id: 21, end: true }),
      layerStep("layers_fp16", [0, 0, 0, 0], { id: 22, end: true }),
    ]);
  });

  it('infer_end_requests "0": an END frees the state without running the model and returns no outputs', async () => {
    assert.equal(await accumulate(server.url, "no_end_run", 5, { id: 1, start: true }), 5);
    assert.equal(await accumulate(server.url, "no_end_run", 3, { id: 1 }), 8);
    const executions = await executionCount(server.url, "no_end_run");
    assert.equal(executions, 2);
    const end = await infer(server.url, "no_end_run", int32Input(100), { id: 1, end: true });
    assert.equal(end.status, 200, JSON.stringify(end.body));
    assert.deepEqual(end.body.outputs, []);
    assert.equal(await executionCount(server.url, "no_end_run"), executions);
    const { summary } = await listSequences(server.url, "no_end_run");
    assert.deepEqual([summary.live, summary.state_bytes, summary.ended.end], [0, 0, 1]);
    assertError(
      await infer(server.url, "no_end_run", int32Input(1), { id: 1 }),
      400,
      startFlagMessage(1, "no_end_run"),
    );
    // A length-1 sequence (START and END) is an END too: nothing runs.
    const single = await infer(server.url, "no_end_run", int32Input(7), { id: 2, start: true, end: true });
    assert.deepEqual(single.body.outputs, []);
    assert.equal(await executionCount(server.url, "no_end_run"), executions);
  });

  it("a state the model gives back larger than its config's dims is kept as the model gave it, as Triton keeps it", async () => {
    // Triton's growable-memory QA: steps 1, 2, 3 answer 1, 3, 6 (the state [0, 1, 2, 3]).
    const step = (value: number, sequence: { id: number; start?: boolean; end?: boolean }) =>
      infer(
        server.url,
        "growing_nobatch",
        [{ name: "INPUT", datatype: "INT32", shape: [1], data: [value] }],
        sequence,
      );
    const sums: number[] = [];
    for (const [value, sequence] of [
      [1, { id: 81, start: true }],
      [2, { id: 81 }],
    ] as const) {
      sums.push(outputData(await step(value, sequence), "OUTPUT")[0] as number);
    }
    // The state is counted as it is held: [0, 1, 2] INT32.
    assert.equal((await findSequence(server.url, "growing_nobatch", 81))?.stateBytes, grownStateBytes(3));
    sums.push(outputData(await step(3, { id: 81, end: true }), "OUTPUT")[0] as number);
    assert.deepEqual(sums, [1, 3, 6]);
    assert.equal(await findSequence(server.url, "growing_nobatch", 81), undefined);
  });

  it("a state grown past the config's dims is held to sequence_state_max_bytes as it is held", async () => {
    const step = (value: number, sequence: { id: number; start?: boolean; end?: boolean }) =>
      infer(
        server.url,
        "growing_limited",
        [{ name: "INPUT", datatype: "INT32", shape: [1], data: [value] }],
        sequence,
      );
    assert.deepEqual(outputData(await step(1, { id: 91, start: true }), "OUTPUT"), [1]);
    assert.deepEqual(outputData(await step(2, { id: 91 }), "OUTPUT"), [3]);
    // A fourth value would pass the limit: refused, and the state stays [0, 1, 2].
    const refused = await step(4, { id: 91 });
    assert.equal(refused.status, 429, JSON.stringify(refused.body));
    assert.deepEqual(refused.body, {
      error: `the state of sequence 91 of model 'growing_limited' would hold ${grownStateBytes(4)} bytes, more than its sequence_state_max_bytes (${grownStateBytes(3)}): the step is not applied, and the state stays as it was`,
    });
    assert.equal((await findSequence(server.url, "growing_limited", 91))?.stateBytes, grownStateBytes(3));
    assert.deepEqual(outputData(await step(3, { id: 91, end: true }), "OUTPUT"), [6]);
  });

  it("use_growable_memory and use_same_buffer_for_input_output are accepted, each with a line saying what seqserve does instead", () => {
    const notes = lines.filter((l) => l.event === "config_note").map((l) => String(l.msg));
    for (const field of ["use_growable_memory", "use_same_buffer_for_input_output"]) {
      assert.ok(
        notes.includes(
          `${field} of state 'STATE' of model 'growing_nobatch' has no effect here: seqserve keeps the state in host memory and takes it as the model outputs it, grown or not`,
        ),
        notes.join("\n"),
      );
    }
  });

  it("batched: sequences whose states have grown apart run in batches of their own, each kept as its model gave it", async () => {
    const step = (id: number, value: number, flags: { start?: boolean; end?: boolean } = {}) =>
      infer(server.url, "growing", [{ name: "INPUT", datatype: "INT32", shape: [1, 1], data: [value] }], {
        id,
        ...flags,
      }).then((answer) => {
        assert.equal(answer.status, 200, JSON.stringify(answer.body));
        return outputData(answer, "OUTPUT")[0] as number;
      });
    assert.equal(await step(71, 5, { start: true }), 5);
    assert.equal(await step(71, 7), 12);
    // 71's state is [1, 3] now, a new sequence's [1, 2]: both step at once, with a START.
    assert.deepEqual(
      await Promise.all([step(71, 1), step(72, 10, { start: true }), step(73, 4, { start: true })]),
      [13, 10, 4],
    );
    assert.deepEqual(await Promise.all([step(72, 1), step(73, 2)]), [11, 6]);
    assert.equal((await findSequence(server.url, "growing", 71))?.stateBytes, grownStateBytes(4));
    assert.equal((await findSequence(server.url, "growing", 72))?.stateBytes, grownStateBytes(3));
    assert.deepEqual(
      await Promise.all([step(71, 2, { end: true }), step(72, 0, { end: true }), step(73, 0, { end: true })]),
      [15, 11, 6],
    );
    assert.equal((await listSequences(server.url, "growing")).sequences.length, 0);
  });

  it("shared inputs: requests that disagree on a shared input's value run in different batches", async () => {
    const plan: Record<number, { scale: number; values: number[] }> = {
      61: { scale: 2, values: [1, 2, 3] },
      62: { scale: 3, values: [1, 2, 3] },
      63: { scale: 2, values: [10, 20, 30] },
      64: { scale: 3, values: [10, 20, 30] },
    };
    const ids = Object.keys(plan).map(Number);
    const step = async (id: number, index: number): Promise<number> => {
      const { scale, values } = plan[id]!;
      const inputs: JsonInput[] = [
        { name: "INPUT", datatype: "INT32", shape: [1, 1], data: [values[index]!] },
        { name: "SCALE", datatype: "INT32", shape: [], data: [scale] },
      ];
      const answer = await infer(server.url, "shared", inputs, {
        id,
        start: index === 0,
        end: index === values.length - 1,
      });
      return outputData(answer, "OUTPUT")[0] as number;
    };
    const outputs = [await Promise.all(ids.map((id) => step(id, 0)))];
    const { sequences } = await listSequences(server.url, "shared");
    const slot = (id: number) => sequences.find((s) => s.id === BigInt(id))!.slot!;
    for (const index of [1, 2]) outputs.push(await Promise.all(ids.map((id) => step(id, index))));
    assert.deepEqual(outputs, [
      [2, 3, 20, 30],
      [6, 9, 60, 90],
      [12, 18, 120, 180],
    ]);
    // Utilization 0.5 makes each round two batches, one per SCALE value.
    const two = [slot(61), slot(63)];
    const three = [slot(62), slot(64)];
    assert.deepEqual(
      await batchCounts(server.url, "shared"),
      directBatchSizes([two, three, two, three, two, three]),
    );
  });
});
