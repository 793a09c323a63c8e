import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { controlEchoModel } from "../../tools/onnx/sequence-models.ts";
import { refusedUpgrade } from "../http/support/ws-client.ts";
import { infer, inferBinary } from "../support/http-client.ts";
import { assertError, int32Input, listSequences } from "../support/sequence-kit.ts";
import { startTestServer, type TestServer } from "../support/test-server.ts";

// Every encoding of the control tensors (Triton's control_input): START / END / READY as
// int32_false_true, fp32_false_true and bool_false_true with the configured values, and
// CORRID as UINT64, INT64, UINT32, INT32 (the id's low 32 bits) and STRING. The model
// echoes each control tensor, so the client sees exactly what the model received; outputs
// come back through the binary extension, bit for bit (uint64 ids above 2^53 included).

type FlagType = "INT32" | "FP32" | "BOOL";
type CorridType = "UINT64" | "INT64" | "UINT32" | "INT32" | "BYTES";

interface ControlModel {
  readonly flags: FlagType;
  readonly falseTrue: string;
  readonly corrid: CorridType;
}

const CONFIG_TYPE: Record<FlagType | CorridType, string> = {
  INT32: "TYPE_INT32",
  FP32: "TYPE_FP32",
  BOOL: "TYPE_BOOL",
  UINT64: "TYPE_UINT64",
  INT64: "TYPE_INT64",
  UINT32: "TYPE_UINT32",
  BYTES: "TYPE_STRING",
};
const ENCODING: Record<FlagType, string> = {
  INT32: "int32_false_true",
  FP32: "fp32_false_true",
  BOOL: "bool_false_true",
};

const MODELS: Record<string, ControlModel> = {
  ctl_int32_u64: { flags: "INT32", falseTrue: "[ 2, 5 ]", corrid: "UINT64" },
  ctl_fp32_i64: { flags: "FP32", falseTrue: "[ 0.5, 1.5 ]", corrid: "INT64" },
  ctl_bool_u32: { flags: "BOOL", falseTrue: "[ false, true ]", corrid: "UINT32" },
  ctl_int32_i32: { flags: "INT32", falseTrue: "[ 0, 1 ]", corrid: "INT32" },
  ctl_bool_str: { flags: "BOOL", falseTrue: "[ false, true ]", corrid: "BYTES" },
};

function config(name: string, model: ControlModel): string {
  const flag = CONFIG_TYPE[model.flags];
  const control = (tensor: string, kind: string) =>
    `{ name: "${tensor}" control [ { kind: ${kind} ${ENCODING[model.flags]}: ${model.falseTrue} } ] }`;
  return `
name: "${name}"
backend: "onnxruntime"
max_batch_size: 4
input [ { name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [
  { name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] },
  { name: "OUT_START" data_type: ${flag} dims: [ 1 ] },
  { name: "OUT_END" data_type: ${flag} dims: [ 1 ] },
  { name: "OUT_READY" data_type: ${flag} dims: [ 1 ] },
  { name: "OUT_CORRID" data_type: ${CONFIG_TYPE[model.corrid]} dims: [ 1 ] }
]
sequence_batching {
  max_sequence_idle_microseconds: 60000000
  control_input [
    ${control("START", "CONTROL_SEQUENCE_START")},
    ${control("END", "CONTROL_SEQUENCE_END")},
    ${control("READY", "CONTROL_SEQUENCE_READY")},
    { name: "CORRID" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: ${CONFIG_TYPE[model.corrid]} } ] }
  ]
}
`;
}

let server: TestServer;
before(async () => {
  server = await startTestServer(
    Object.fromEntries(
      Object.entries(MODELS).map(([name, model]) => [
        name,
        { config: config(name, model), onnx: controlEchoModel(model.flags, model.corrid) },
      ]),
    ),
  );
});
after(() => server.stop());

type Echo = { start: number; end: number; ready: number; corrid: bigint | number | string; output: number };

function flagValue(type: FlagType, raw: Buffer): number {
  assert.equal(raw.byteLength, type === "BOOL" ? 1 : 4);
  if (type === "FP32") return raw.readFloatLE(0);
  if (type === "BOOL") return raw[0]!;
  return raw.readInt32LE(0);
}

function corridValue(type: CorridType, raw: Buffer): bigint | number | string {
  switch (type) {
    case "UINT64":
      return raw.readBigUInt64LE(0);
    case "INT64":
      return raw.readBigInt64LE(0);
    case "UINT32":
      return raw.readUInt32LE(0);
    case "INT32":
      return raw.readInt32LE(0);
    case "BYTES": {
      const length = raw.readUInt32LE(0);
      assert.equal(raw.byteLength, 4 + length);
      return raw.subarray(4).toString("utf8");
    }
  }
}

/** One request to a control-echo model; resolves with what the model saw. */
async function echo(
  name: string,
  value: number,
  sequence: { id: bigint | string; start?: boolean; end?: boolean },
): Promise<Echo> {
  const model = MODELS[name]!;
  const answer = await inferBinary(
    server.url,
    name,
    [{ name: "INPUT", datatype: "INT32", shape: [1, 1], data: new Int32Array([value]) }],
    sequence,
  );
  assert.equal(answer.status, 200, answer.error);
  const out = (tensor: string) => {
    const raw = answer.outputs.get(tensor);
    assert.ok(raw !== undefined, `no ${tensor} in the answer`);
    return raw;
  };
  return {
    output: out("OUTPUT").readInt32LE(0),
    start: flagValue(model.flags, out("OUT_START")),
    end: flagValue(model.flags, out("OUT_END")),
    ready: flagValue(model.flags, out("OUT_READY")),
    corrid: corridValue(model.corrid, out("OUT_CORRID")),
  };
}

/** A three-request sequence: START, a middle request, END; then a length-1 sequence. */
async function checkFlags(name: string, id: bigint | string, f: number, t: number, corrid: Echo["corrid"]) {
  assert.deepEqual(await echo(name, 1, { id, start: true }), {
    output: 1,
    start: t,
    end: f,
    ready: t,
    corrid,
  });
  assert.deepEqual(await echo(name, 2, { id }), { output: 2, start: f, end: f, ready: t, corrid });
  assert.deepEqual(await echo(name, 3, { id, end: true }), { output: 3, start: f, end: t, ready: t, corrid });
  assert.deepEqual(await echo(name, 4, { id, start: true, end: true }), {
    output: 4,
    start: t,
    end: t,
    ready: t,
    corrid,
  });
}

const U64_MAX = 18446744073709551615n;
const ABOVE_2_53 = 2n ** 53n + 1n;

describe("control tensors", { timeout: 60_000 }, () => {
  it("int32_false_true [2, 5] flags and a UINT64 CORRID, exact above 2^53", async () => {
    await checkFlags("ctl_int32_u64", U64_MAX, 2, 5, U64_MAX);
    await checkFlags("ctl_int32_u64", ABOVE_2_53, 2, 5, ABOVE_2_53);
  });

  it("fp32_false_true [0.5, 1.5] flags and an INT64 CORRID (the id's bits as int64)", async () => {
    await checkFlags("ctl_fp32_i64", U64_MAX, 0.5, 1.5, -1n);
    await checkFlags("ctl_fp32_i64", ABOVE_2_53, 0.5, 1.5, ABOVE_2_53);
  });

  it("bool_false_true flags and a UINT32 CORRID (the id's low 32 bits)", async () => {
    await checkFlags("ctl_bool_u32", ABOVE_2_53, 0, 1, 1);
    await checkFlags("ctl_bool_u32", 2n ** 32n + 7n, 0, 1, 7);
    await checkFlags("ctl_bool_u32", 4000000000n, 0, 1, 4000000000);
  });

  it("an INT32 CORRID carries the id's low 32 bits, as a signed value", async () => {
    await checkFlags("ctl_int32_i32", 0xfffffffen, 0, 1, -2);
    await checkFlags("ctl_int32_i32", 2n ** 33n + 5n, 0, 1, 5);
  });

  it("a STRING CORRID carries string ids, UTF-8 included", async () => {
    await checkFlags("ctl_bool_str", "call-7", 0, 1, "call-7");
    await checkFlags("ctl_bool_str", "séquence ✓", 0, 1, "séquence ✓");
    // Digits in a string id stay a string.
    await checkFlags("ctl_bool_str", "123", 0, 1, "123");
  });

  it("a START without an id gets a string id from the server when the CORRID carries strings", async () => {
    const first = await inferBinary(
      server.url,
      "ctl_bool_str",
      [{ name: "INPUT", datatype: "INT32", shape: [1, 1], data: new Int32Array([1]) }],
      { start: true },
    );
    assert.equal(first.status, 200, first.error);
    const id = (first.header.parameters as { sequence_id?: unknown } | undefined)?.sequence_id;
    assert.equal(typeof id, "string", JSON.stringify(first.header));
    assert.equal(corridValue("BYTES", first.outputs.get("OUT_CORRID")!), id, "the model saw the id told");
    assert.deepEqual(await echo("ctl_bool_str", 2, { id: id as string, end: true }), {
      output: 2,
      start: 0,
      end: 1,
      ready: 1,
      corrid: id,
    });
  });

  it("refuses an id whose type the CORRID cannot carry, with Triton's data-type message", async () => {
    // Triton opens the message with the request's id ("<id_unknown>" for one without).
    const expects = (model: string, given: string, wanted: string) =>
      `[request id: <id_unknown>] sequence batching control 'CORRID' data-type is '${given}', but model '${model}' expects '${wanted}'`;
    for (const [model, wanted] of [
      ["ctl_int32_u64", "UINT64"],
      ["ctl_fp32_i64", "INT64"],
      ["ctl_bool_u32", "UINT32"],
      ["ctl_int32_i32", "INT32"],
    ] as const) {
      assertError(
        await infer(server.url, model, int32Input(1), { id: "call-7", start: true }),
        400,
        expects(model, "BYTES", wanted),
      );
    }
    assertError(
      await infer(server.url, "ctl_bool_str", int32Input(1), { id: 7, start: true }),
      400,
      expects("ctl_bool_str", "UINT64", "BYTES"),
    );
    // A WebSocket stream's id is checked as the stream opens, before any request: the words
    // are Triton's, without a request id to open them.
    const port = Number(new URL(server.url).port);
    const refused = await refusedUpgrade({ port }, "/v2/models/ctl_int32_u64/stream?sequence_id=call-7");
    assert.equal(refused.status, 400);
    assert.equal(
      refused.json.error,
      "sequence batching control 'CORRID' data-type is 'BYTES', but model 'ctl_int32_u64' expects 'UINT64'",
    );
    // Checked as Triton checks the request, before the sequence batcher's batch of one.
    const twoRows = [{ name: "INPUT", datatype: "INT32", shape: [2, 1], data: [1, 2] }];
    assertError(
      await infer(server.url, "ctl_int32_u64", twoRows, { id: "x", start: true }),
      400,
      expects("ctl_int32_u64", "BYTES", "UINT64"),
    );
    assertError(
      await infer(server.url, "ctl_int32_u64", twoRows, { id: 8, start: true }),
      400,
      "inference request to model 'ctl_int32_u64' must specify batch-size 1 due to requirements of sequence batcher",
    );
    for (const model of Object.keys(MODELS)) {
      assert.equal(
        (await listSequences(server.url, model)).summary.live,
        0,
        `${model} admitted a refused request`,
      );
    }
  });

  it("lists uint64 ids above 2^53 and string ids exactly in the sequences API", async () => {
    await echo("ctl_int32_u64", 1, { id: U64_MAX, start: true });
    await echo("ctl_int32_u64", 1, { id: ABOVE_2_53, start: true });
    await echo("ctl_bool_str", 1, { id: "call-7", start: true });
    const u64 = await listSequences(server.url, "ctl_int32_u64");
    assert.deepEqual(
      u64.sequences.map((s) => [s.id, s.idType]),
      [
        [U64_MAX, "uint64"],
        [ABOVE_2_53, "uint64"],
      ],
    );
    // The digits as written, never rounded to a double.
    assert.match(u64.text, /"id":18446744073709551615,/);
    assert.match(u64.text, /"id":9007199254740993,/);
    const strings = await listSequences(server.url, "ctl_bool_str");
    assert.deepEqual(
      strings.sequences.map((s) => [s.id, s.idType]),
      [["call-7", "string"]],
    );
    // And the same ids keep working for their sequences' next requests.
    assert.equal((await echo("ctl_int32_u64", 9, { id: U64_MAX, end: true })).corrid, U64_MAX);
    assert.equal((await echo("ctl_int32_u64", 9, { id: ABOVE_2_53, end: true })).corrid, ABOVE_2_53);
    assert.equal((await echo("ctl_bool_str", 9, { id: "call-7", end: true })).corrid, "call-7");
  });
});
