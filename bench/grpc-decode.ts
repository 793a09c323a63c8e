// What the gRPC frontend's size check before decoding (src/frontends/grpc/decoded-size.ts)
// adds to a request: a Silero VAD step as the benchmark sends it (raw contents, a sequence
// id), decoded by protobufjs alone and with the check first, in alternating rounds.
//
//   node --import tsx bench/grpc-decode.ts [--rounds 4] [--messages 200000]
import { parseArgs } from "node:util";
import { boundedDecoder, DecodeRefusal } from "../src/frontends/grpc/decoded-size.ts";
import { inferenceTypes } from "../src/frontends/grpc/proto-definitions.ts";

const { values } = parseArgs({
  options: { rounds: { type: "string", default: "4" }, messages: { type: "string", default: "200000" } },
});
const rounds = Number(values.rounds);
const messages = Number(values.messages);

const type = inferenceTypes().lookupType("inference.ModelInferRequest");
const request = type
  .encode({
    model_name: "silero_vad_stateful",
    id: "step",
    parameters: { sequence_id: { int64_param: 12345 }, sequence_start: { bool_param: false } },
    inputs: [
      { name: "input", datatype: "FP32", shape: [1, 512] },
      { name: "sr", datatype: "INT64", shape: [1] },
    ],
    raw_input_contents: [Buffer.alloc(2048), Buffer.alloc(8)],
  })
  .finish();

const decoders = {
  plain: (bytes: Uint8Array) => type.decode(bytes),
  checked: boundedDecoder(type, 64 * 1024 * 1024, new DecodeRefusal()),
};

const figures: Record<string, number[]> = { plain: [], checked: [] };
for (let round = 0; round < rounds; round++) {
  for (const [name, decode] of Object.entries(decoders)) {
    const start = process.hrtime.bigint();
    for (let i = 0; i < messages; i++) decode(request);
    figures[name]!.push(Number(process.hrtime.bigint() - start) / messages);
  }
}
for (const [name, ns] of Object.entries(figures)) {
  const sorted = [...ns].sort((a, b) => a - b);
  console.log(`${name}: ${sorted.map((v) => (v / 1000).toFixed(2)).join(", ")} µs a message`);
}
