import assert from "node:assert/strict";
import { test } from "node:test";
import { boundedDecoder, DecodeRefusal } from "../../src/frontends/grpc/decoded-size.ts";
import { inferenceTypes } from "../../src/frontends/grpc/proto-definitions.ts";

// The walk that prices a message's typed values before decoding must read the message as
// protobufjs's decoder does: whatever the decoder goes on to decode, the walk counts.

const MiB = 1024 * 1024;
const request = inferenceTypes().lookupType("inference.ModelInferRequest");

/** A ModelInferRequest whose typed contents hold `count` int64 values (8 bytes each once decoded). */
function int64Request(count: number): Uint8Array {
  return request
    .encode(
      request.fromObject({
        model_name: "m",
        inputs: [
          {
            name: "X",
            datatype: "INT64",
            shape: [count],
            contents: { int64_contents: new Array(count).fill(1) },
          },
        ],
      }),
    )
    .finish();
}

/** A varint's bytes. */
function varint(value: number): number[] {
  const bytes: number[] = [];
  for (; value >= 0x80; value = Math.floor(value / 128)) bytes.push((value % 128) | 0x80);
  bytes.push(value);
  return bytes;
}

test("typed values past the limit are refused before decoding, whatever unknown fields come first", () => {
  const refusal = new DecodeRefusal();
  const decode = boundedDecoder(request, MiB, refusal);
  const values = int64Request(200_000); // 1.6 MB once decoded
  // An unknown field of every wire type the decoder skips, a group (wire type 3) included,
  // before the values: the decoder skips them and decodes what follows.
  const group = [...varint((99 << 3) | 3), ...varint((7 << 3) | 0), 5, ...varint((99 << 3) | 4)];
  const unknown = [...varint((98 << 3) | 0), 1, ...varint((97 << 3) | 5), 0, 0, 0, 0];
  for (const prefix of [group, unknown, [...unknown, ...group, ...group]]) {
    const message = Uint8Array.from([...prefix, ...values]);
    assert.equal((request.decode(message) as unknown as { model_name: string }).model_name, "m");
    assert.throws(() => decode(message), Error, `refused after ${prefix.length} bytes of unknown fields`);
    assert.match(refusal.take() ?? "", /would take more than 1048576 bytes once decoded/);
  }
  // Within the limit, decoded as protobufjs decodes it.
  const small = Uint8Array.from([...group, ...int64Request(100)]);
  assert.equal((decode(small) as unknown as { inputs: unknown[] }).inputs.length, 1);
});
