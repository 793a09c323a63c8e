// What decoding a tensor sent as typed values costs the event loop: protobufjs's decoder
// followed by a copy into the tensor's typed array (what the gRPC frontends did), against
// seqserve's decoding straight into typed arrays (src/frontends/grpc/typed-array-fields.ts).
// Each case is a ModelInferRequest with one input in InferTensorContents; the largest is
// the most int32 values the default --grpc-max-decompressed-bytes (64 MiB) lets through
// now (4 bytes each; it was 8 million at 8 bytes each), most of whose time here is the
// first write of 64 MB of new memory (about 240 ms on a 2-core virtual machine). The last
// sends each value in a packed run of its own, as concatenated messages do.
//
//   node --import tsx bench/grpc-typed-contents.ts [--rounds 9]
import { join } from "node:path";
import { parseArgs } from "node:util";
import protobuf from "protobufjs";
import { int64ToBigInt, type LongLike } from "../src/frontends/grpc/int64.ts";
import { inferenceTypes, PROTO_DIR } from "../src/frontends/grpc/proto-definitions.ts";
import { decodeTensorContents } from "../src/frontends/grpc/tensor-contents.ts";

const { values } = parseArgs({ options: { rounds: { type: "string", default: "9" } } });
const rounds = Number(values.rounds);

const seqserve = inferenceTypes().lookupType("inference.ModelInferRequest");
const plain = new protobuf.Root()
  .loadSync(join(PROTO_DIR, "grpc_service.proto"), { keepCase: true })
  .lookupType("inference.ModelInferRequest");

type Field = "fp32_contents" | "int_contents" | "int64_contents";
const DATATYPE = { fp32_contents: "FP32", int_contents: "INT32", int64_contents: "INT64" } as const;

interface Case {
  readonly name: string;
  readonly field: Field;
  readonly count: number;
  readonly value: (i: number) => number;
  readonly repeat: number;
  /** Each value in a packed run of its own (what concatenating messages gives). */
  readonly runs?: boolean;
}

const cases: Case[] = [
  {
    name: "Silero VAD chunk, 512 FP32",
    field: "fp32_contents",
    count: 512,
    value: (i) => i / 512,
    repeat: 20_000,
  },
  { name: "1M FP32", field: "fp32_contents", count: 1 << 20, value: (i) => i / 7, repeat: 3 },
  { name: "1M INT32 of 1 byte", field: "int_contents", count: 1 << 20, value: () => 1, repeat: 3 },
  { name: "1M INT64 of 3 bytes", field: "int64_contents", count: 1 << 20, value: () => 20_000, repeat: 3 },
  { name: "16M INT32 of 1 byte (64 MiB)", field: "int_contents", count: 1 << 24, value: () => 1, repeat: 1 },
  {
    name: "100,000 FP32, a run each",
    field: "fp32_contents",
    count: 100_000,
    value: (i) => i,
    repeat: 3,
    runs: true,
  },
];

/** The tensor's data as the frontend made it from protobufjs's arrays. */
function copied(field: Field, values: readonly unknown[]): ArrayLike<unknown> {
  if (field === "fp32_contents") return Float32Array.from(values as number[]);
  if (field === "int_contents") return Int32Array.from(values as number[]);
  const out = new BigInt64Array(values.length);
  for (let i = 0; i < values.length; i++) out[i] = int64ToBigInt(values[i] as LongLike, false);
  return out;
}

const ms = (start: bigint, repeat: number): number => Number(process.hrtime.bigint() - start) / 1e6 / repeat;

/** The request: its values in one packed run, or each in a run of its own. */
function requestOf(c: Case): Uint8Array {
  const values = Array.from({ length: c.count }, (_, i) => c.value(i));
  const input = { name: "x", datatype: DATATYPE[c.field], shape: [c.count] };
  if (c.runs !== true) {
    const contents = { [c.field]: values };
    return seqserve.encode({ model_name: "m", inputs: [{ ...input, contents }] }).finish();
  }
  // InferInputTensor's contents (field 5) written by hand: fp32_contents (field 6) once
  // per value.
  const w = protobuf.Writer.create();
  w.uint32((1 << 3) | 2).string("m");
  w.uint32((5 << 3) | 2).fork();
  w.uint32((1 << 3) | 2).string(input.name);
  w.uint32((2 << 3) | 2).string(input.datatype);
  w.uint32((3 << 3) | 2)
    .fork()
    .int64(c.count)
    .ldelim();
  w.uint32((5 << 3) | 2).fork();
  for (const value of values)
    w.uint32((6 << 3) | 2)
      .fork()
      .float(value)
      .ldelim();
  return w.ldelim().ldelim().finish();
}

for (const c of cases) {
  const message = requestOf(c);
  const before: number[] = [];
  const after: number[] = [];
  for (let round = 0; round < rounds; round++) {
    let start = process.hrtime.bigint();
    for (let i = 0; i < c.repeat; i++) {
      const decoded = plain.decode(message) as unknown as {
        inputs: { contents: Record<Field, unknown[]> }[];
      };
      copied(c.field, decoded.inputs[0]!.contents[c.field]);
    }
    before.push(ms(start, c.repeat));
    start = process.hrtime.bigint();
    for (let i = 0; i < c.repeat; i++) {
      const decoded = seqserve.decode(message) as unknown as { inputs: { contents: object }[] };
      decodeTensorContents(
        { input: "x", model: "m" },
        DATATYPE[c.field],
        [c.count],
        decoded.inputs[0]!.contents,
      );
    }
    after.push(ms(start, c.repeat));
  }
  const median = (v: number[]): number => [...v].sort((a, b) => a - b)[Math.floor(v.length / 2)]!;
  const spread = (v: number[]): string => `${Math.min(...v).toPrecision(3)}–${Math.max(...v).toPrecision(3)}`;
  console.log(
    `${c.name} (${(message.byteLength / 1e6).toFixed(3)} MB): protobufjs + copy ${median(before).toPrecision(3)} ms (${spread(before)}), typed arrays ${median(after).toPrecision(3)} ms (${spread(after)})`,
  );
}
