import assert from "node:assert/strict";
import { join } from "node:path";
import { test } from "node:test";
import fc from "fast-check";
import protobuf from "protobufjs";
import { type Int64, int64ToBigInt } from "../../src/frontends/grpc/int64.ts";
import { inferenceTypes, PROTO_DIR } from "../../src/frontends/grpc/proto-definitions.ts";
import { tfsTypes } from "../../src/frontends/tfs/proto-definitions.ts";

// Tensor messages' repeated numbers decode into typed arrays (typed-array-fields.ts). The
// oracle is protobufjs's own decoder of the same protos: for any values, sent packed,
// unpacked or in several runs, with other fields and unknown fields around them, both
// decoders must read the same message.

/** The same protos, decoded by protobufjs alone. */
const plain = new protobuf.Root().loadSync(join(PROTO_DIR, "grpc_service.proto"), { keepCase: true });
const plainTfs = new protobuf.Root();
plainTfs.resolvePath = (_origin, target) => (target.startsWith("google/") ? target : join(PROTO_DIR, target));
plainTfs.loadSync("tensorflow/core/framework/tensor.proto", { keepCase: true });

type Kind = "bool" | "int32" | "int64" | "uint32" | "uint64" | "float" | "double";
const WIRE: Record<Kind, number> = { bool: 0, int32: 0, int64: 0, uint32: 0, uint64: 0, float: 5, double: 1 };

const VALUES: Record<Kind, fc.Arbitrary<unknown>> = {
  bool: fc.boolean(),
  int32: fc.integer(),
  int64: fc.bigInt({ min: -(2n ** 63n), max: 2n ** 63n - 1n }).map(String),
  uint32: fc.nat({ max: 2 ** 32 - 1 }),
  uint64: fc.bigInt({ min: 0n, max: 2n ** 64n - 1n }).map(String),
  float: fc.float(),
  double: fc.double(),
};

interface Run {
  readonly packed: boolean;
  readonly values: unknown[];
}

/** A field's values as the wire may carry them: in runs, each packed or one tag a value. */
const runsOf = (kind: Kind): fc.Arbitrary<Run[]> =>
  fc.array(fc.record({ packed: fc.boolean(), values: fc.array(VALUES[kind], { maxLength: 40 }) }), {
    maxLength: 3,
  });

function writeRuns(w: protobuf.Writer, id: number, kind: Kind, runs: readonly Run[]): void {
  const write = (value: unknown): void => {
    (w[kind] as (v: unknown) => protobuf.Writer).call(w, value);
  };
  for (const run of runs) {
    if (run.packed) {
      w.uint32((id << 3) | 2).fork();
      for (const value of run.values) write(value);
      w.ldelim();
    } else {
      for (const value of run.values) {
        w.uint32((id << 3) | WIRE[kind]);
        write(value);
      }
    }
  }
}

/** What protobufjs decoded, as the typed array's elements. */
function expected(kind: Kind, values: readonly unknown[] | undefined): unknown[] {
  return (values ?? []).map((v) => {
    if (kind === "bool") return v ? 1 : 0;
    if (kind === "int64" || kind === "uint64") return int64ToBigInt(v as Int64, kind === "uint64");
    return v;
  });
}

const CONTENTS: readonly [string, number, Kind][] = [
  ["bool_contents", 1, "bool"],
  ["int_contents", 2, "int32"],
  ["int64_contents", 3, "int64"],
  ["uint_contents", 4, "uint32"],
  ["uint64_contents", 5, "uint64"],
  ["fp32_contents", 6, "float"],
  ["fp64_contents", 7, "double"],
];

test("InferTensorContents: every number field, packed or not, in runs, reads as protobufjs reads it, into typed arrays", () => {
  const ours = inferenceTypes().lookupType("inference.InferTensorContents");
  const reference = plain.lookupType("inference.InferTensorContents");
  fc.assert(
    fc.property(
      fc.tuple(...CONTENTS.map(([, , kind]) => runsOf(kind))),
      fc.array(fc.uint8Array({ maxLength: 8 }), { maxLength: 3 }),
      (fields, strings) => {
        const w = protobuf.Writer.create();
        // An unknown field first: both decoders skip it.
        w.uint32((99 << 3) | 0).uint32(7);
        CONTENTS.forEach(([, id, kind], i) => {
          writeRuns(w, id, kind, fields[i]!);
        });
        for (const s of strings) w.uint32((8 << 3) | 2).bytes(s);
        const bytes = w.finish();
        const got = ours.decode(bytes) as unknown as Record<string, ArrayLike<unknown>>;
        const want = reference.decode(bytes) as unknown as Record<string, readonly unknown[]>;
        for (const [name, , kind] of CONTENTS) {
          const values = got[name]!;
          if (values.length > 0) assert.ok(ArrayBuffer.isView(values), `${name} is a typed array`);
          assert.deepStrictEqual(Array.from(values), expected(kind, want[name]), name);
        }
        assert.deepStrictEqual(
          Array.from(got.bytes_contents ?? [], (b) => [...(b as Uint8Array)]),
          strings.map((s) => [...s]),
        );
      },
    ),
    { seed: 11, numRuns: 300 },
  );
});

test("the arrays own their buffers, sized to their values, so a tensor can move them to a worker", () => {
  const type = inferenceTypes().lookupType("inference.InferTensorContents");
  const w = protobuf.Writer.create();
  writeRuns(w, 6, "float", [{ packed: true, values: [1, 2, 3] }]);
  writeRuns(w, 3, "int64", [
    { packed: false, values: ["-1"] },
    { packed: true, values: ["9223372036854775807", "-9223372036854775808"] },
  ]);
  const bytes = w.finish();
  const decoded = type.decode(bytes) as unknown as {
    fp32_contents: Float32Array;
    int64_contents: BigInt64Array;
  };
  assert.equal(decoded.fp32_contents.buffer.byteLength, 12);
  assert.notEqual(decoded.fp32_contents.buffer, bytes.buffer);
  assert.deepStrictEqual([...decoded.int64_contents], [-1n, 2n ** 63n - 1n, -(2n ** 63n)]);
  assert.equal(decoded.int64_contents.buffer.byteLength, 24);
});

test("through ModelInferRequest, the contents of each input decode into typed arrays", () => {
  const type = inferenceTypes().lookupType("inference.ModelInferRequest");
  const bytes = type
    .encode({
      model_name: "m",
      inputs: [
        { name: "a", datatype: "FP32", shape: [2], contents: { fp32_contents: [0.5, -2] } },
        {
          name: "b",
          datatype: "UINT64",
          shape: [1],
          contents: { uint64_contents: ["18446744073709551615"] },
        },
      ],
    })
    .finish();
  const decoded = type.decode(bytes) as unknown as {
    inputs: { contents: { fp32_contents: Float32Array; uint64_contents: BigUint64Array } }[];
  };
  assert.deepStrictEqual(decoded.inputs[0]!.contents.fp32_contents, Float32Array.of(0.5, -2));
  assert.deepStrictEqual(decoded.inputs[1]!.contents.uint64_contents, BigUint64Array.of(2n ** 64n - 1n));
});

const TENSOR_PROTO_NUMBERS: readonly [string, number, Kind][] = [
  ["float_val", 5, "float"],
  ["double_val", 6, "double"],
  ["int_val", 7, "int32"],
  ["int64_val", 10, "int64"],
  ["bool_val", 11, "bool"],
  ["half_val", 13, "int32"],
  ["uint32_val", 16, "uint32"],
  ["uint64_val", 17, "uint64"],
];

test("TensorProto: its *_val numbers as typed arrays, its other fields (dtype, shape, content, strings) as protobufjs reads them", () => {
  const ours = tfsTypes().lookupType("tensorflow.TensorProto");
  const reference = plainTfs.lookupType("tensorflow.TensorProto");
  const shape = plainTfs.lookupType("tensorflow.TensorShapeProto");
  fc.assert(
    fc.property(
      fc.tuple(...TENSOR_PROTO_NUMBERS.map(([, , kind]) => runsOf(kind))),
      fc.nat({ max: 30 }),
      fc.array(fc.nat({ max: 1000 }), { maxLength: 4 }),
      fc.uint8Array({ maxLength: 16 }),
      fc.array(fc.uint8Array({ maxLength: 8 }), { maxLength: 3 }),
      fc.nat({ max: 3 }),
      (fields, dtype, dims, content, strings, version) => {
        const w = protobuf.Writer.create();
        if (dtype !== 0) w.uint32((1 << 3) | 0).int32(dtype);
        // The shape in two parts: a message field sent twice merges, its dims concatenated.
        const half = Math.floor(dims.length / 2);
        for (const part of [dims.slice(0, half), dims.slice(half)]) {
          const message = shape.encode({ dim: part.map((size) => ({ size })) }).finish();
          w.uint32((2 << 3) | 2).bytes(message);
        }
        if (version !== 0) w.uint32((3 << 3) | 0).int32(version);
        if (content.length > 0) w.uint32((4 << 3) | 2).bytes(content);
        TENSOR_PROTO_NUMBERS.forEach(([, id, kind], i) => {
          writeRuns(w, id, kind, fields[i]!);
        });
        for (const s of strings) w.uint32((8 << 3) | 2).bytes(s);
        w.uint32((77 << 3) | 2).bytes(Uint8Array.of(1, 2, 3));
        const bytes = w.finish();
        const got = ours.decode(bytes) as unknown as Record<string, unknown>;
        const want = reference.decode(bytes) as unknown as Record<string, unknown>;
        for (const [name, , kind] of TENSOR_PROTO_NUMBERS) {
          if ((want[name] as unknown[] | undefined)?.length) assert.ok(ArrayBuffer.isView(got[name]), name);
          assert.deepStrictEqual(
            Array.from(got[name] as ArrayLike<unknown>),
            expected(kind, want[name] as unknown[]),
            name,
          );
        }
        assert.equal(got.dtype, want.dtype);
        assert.equal(got.version_number, want.version_number);
        assert.deepStrictEqual([...((got.tensor_content as Uint8Array | undefined) ?? [])], [...content]);
        const gotDims = (got.tensor_shape as { dim: { size: Int64 }[] } | null)?.dim ?? [];
        assert.deepStrictEqual(
          gotDims.map((d) => Number(int64ToBigInt(d.size, false))),
          dims,
        );
        assert.deepStrictEqual(
          (got.string_val as Uint8Array[]).map((s) => [...s]),
          strings.map((s) => [...s]),
        );
      },
    ),
    { seed: 11, numRuns: 300 },
  );
});

test("a field sent as 100,000 runs of one value each (as concatenated messages give it) reads whole", () => {
  const type = inferenceTypes().lookupType("inference.InferTensorContents");
  const values = Array.from({ length: 100_000 }, (_, i) => i - 50_000);
  const w = protobuf.Writer.create();
  for (const value of values) writeRuns(w, 2, "int32", [{ packed: true, values: [value] }]);
  const decoded = type.decode(w.finish()) as unknown as { int_contents: Int32Array };
  assert.deepStrictEqual(decoded.int_contents, Int32Array.from(values));
  assert.equal(decoded.int_contents.buffer.byteLength, 400_000, "trimmed to its values");
});

test("a malformed run is refused as protobufjs refuses one: a varint cut off, floats not a whole number of 4 bytes", () => {
  const type = inferenceTypes().lookupType("inference.InferTensorContents");
  const reference = plain.lookupType("inference.InferTensorContents");
  const cases = {
    "a varint cut off at the run's end": Uint8Array.of((2 << 3) | 2, 2, 0x01, 0x80),
    "a run longer than the message": Uint8Array.of((2 << 3) | 2, 5, 0x01),
    "floats in 6 bytes": Uint8Array.of((6 << 3) | 2, 6, 0, 0, 0x80, 0x3f, 0, 0),
    "an unpacked varint cut off": Uint8Array.of((3 << 3) | 0, 0x80, 0x80),
    "a varint of 11 bytes": Uint8Array.of((2 << 3) | 0, ...new Array(10).fill(0x80), 1),
  };
  for (const [what, bytes] of Object.entries(cases)) {
    assert.throws(() => reference.decode(bytes), Error, `protobufjs refuses ${what}`);
    assert.throws(() => type.decode(bytes), Error, what);
  }
});
