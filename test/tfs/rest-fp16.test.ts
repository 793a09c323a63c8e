import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { identityModel } from "../../tools/onnx/test-models.ts";
import { postText } from "../support/http-client.ts";
import { type OvmsServer, startOvmsServer } from "./support/ovms-server.ts";

// An FP16 input's JSON numbers are rounded to half once, from their doubles, as numpy's
// float16 rounds them (tensorflow-serving-api clients build their tensors with numpy). Through
// float32 first, a number could be rounded twice: 1.0004882812509095 is just above the
// midpoint of the halves 1 and 1.0009765625, and float32 rounds it down onto the midpoint,
// which the tie then takes to 1 (0x3c00 where numpy gives 0x3c01).

let ovms: OvmsServer;
before(async () => {
  ovms = await startOvmsServer({ halves: { onnx: identityModel("FP16", [-1]) } });
});
after(() => ovms.stop());

test("FP16 numbers over REST are rounded once, to numpy's float16", async () => {
  // Each with numpy's float16 of it: a double rounding's trap, a tie to even either way,
  // the largest half and the first number that rounds to infinity, and a subnormal.
  const cases: [number, number][] = [
    [1.0004882812509095, 1.0009765625],
    [1.00048828125, 1],
    [1.00146484375, 1.001953125],
    [65519.99, 65504],
    [2 ** -24 * 1.5000001, 2 ** -23],
  ];
  const answer = await postText(
    `${ovms.url}/v1/models/halves:predict`,
    `{"inputs":{"INPUT0":[${cases.map(([sent]) => String(sent)).join(",")}]}}`,
  );
  assert.equal(answer.status, 200, answer.text);
  // Written as float32 is (nine digits where six do not read back): the same float32.
  const outputs = (JSON.parse(answer.text) as { outputs: number[] }).outputs;
  assert.deepEqual(
    outputs.map((v) => Math.fround(v)),
    cases.map(([, half]) => half),
  );
  const infinite = await postText(`${ovms.url}/v1/models/halves:predict`, '{"inputs":{"INPUT0":[65520]}}');
  assert.match(infinite.text, /"outputs":\s*\[\s*Infinity\s*\]/);
});
