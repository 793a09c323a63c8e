import assert from "node:assert/strict";
import { test } from "node:test";
import { parameterValueText } from "../../src/frontends/common/kserve/infer-response-encoder.ts";
import { jsonTensorData } from "../../src/frontends/common/kserve/json-tensor.ts";
import { encodeGenerateResponse } from "../../src/frontends/http/generate/generate-codec.ts";

// Float outputs are written as JSON with each element's shortest round-trip decimal
// (Number#toString), -0 as Triton writes it (-0.0), and non-finite values as Triton's rapidjson writes
// them (NaN, Infinity, -Infinity): element by element, whatever the runs between special
// values.

/** The text each element must have, written one at a time. */
function expectedText(values: ArrayLike<number>): string {
  const texts = Array.from(values, (v) => {
    if (Number.isNaN(v)) return "NaN";
    if (!Number.isFinite(v)) return v > 0 ? "Infinity" : "-Infinity";
    if (v === 0 && 1 / v < 0) return "-0.0";
    return String(v);
  });
  return `[${texts.join(",")}]`;
}

/** Values of every magnitude, integers and subnormals among them, with specials at the ends and between. */
function floats(count: number): number[] {
  const values: number[] = [Number.NaN, -0];
  for (let i = 0; i < count; i++) {
    const magnitude = 10 ** Math.floor(Math.random() * 90 - 45);
    values.push((Math.random() - 0.5) * magnitude, Math.round(Math.random() * 1000), 1e-45 * i);
    if (i % 97 === 0) values.push(Number.POSITIVE_INFINITY, -0, Number.NEGATIVE_INFINITY);
  }
  values.push(1e21, 1e-7, 123456789012345680000, 0, -0);
  return values;
}

test("FP32 and FP64 outputs are written element by element", () => {
  const values = floats(2000);
  for (const data of [Float32Array.from(values), Float64Array.from(values)]) {
    const datatype = data instanceof Float32Array ? "FP32" : "FP64";
    assert.equal(jsonTensorData({ datatype, shape: [data.length], data }), expectedText(data), datatype);
  }
});

test("a run with no special value, an empty tensor and a lone special", () => {
  const plain = Float32Array.from([0.5, -1.25, 3, 1e-7]);
  assert.equal(
    jsonTensorData({ datatype: "FP32", shape: [4], data: plain }),
    "[0.5,-1.25,3,1.0000000116860974e-7]",
  );
  assert.equal(jsonTensorData({ datatype: "FP32", shape: [0], data: new Float32Array(0) }), "[]");
  assert.equal(jsonTensorData({ datatype: "FP64", shape: [1], data: Float64Array.of(-0) }), "[-0.0]");
  assert.deepEqual(
    JSON.parse(jsonTensorData({ datatype: "FP32", shape: [4], data: plain })),
    Array.from(plain),
  );
});

test("response parameters: -0, NaN and the infinities as Triton writes them, bigints exact", () => {
  assert.deepEqual(
    [Number.NaN, Number.POSITIVE_INFINITY, Number.NEGATIVE_INFINITY, 2n ** 63n - 1n, 0.5, "NaN", -0, 0].map(
      parameterValueText,
    ),
    ["NaN", "Infinity", "-Infinity", "9223372036854775807", "0.5", '"NaN"', "-0.0", "0"],
  );
  assert.equal(
    encodeGenerateResponse({
      modelName: "m",
      modelVersion: "1",
      id: "",
      parameters: { low: Number.NEGATIVE_INFINITY },
      outputs: [],
    }),
    '{"model_name":"m","model_version":"1","low":-Infinity}',
  );
});
