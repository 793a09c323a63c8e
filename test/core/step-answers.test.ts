import assert from "node:assert/strict";
import { test } from "node:test";
import {
  STEP_ANSWERS_KEPT,
  STEP_ANSWERS_MAX_BYTES,
  StepAnswers,
} from "../../src/core/sequence/step-answers.ts";
import type { Tensor } from "../../src/core/tensor.ts";

// The answers a sequence keeps for retried steps are bounded in count and in bytes, the
// bytes being what they hold in memory: a BYTES element costs a Uint8Array of its own
// beyond its bytes.

const bytesTensor = (elements: number): Tensor => ({
  datatype: "BYTES",
  shape: [elements],
  data: Array.from({ length: elements }, () => new Uint8Array(0)),
});
const answer = (step: number, tensor: Tensor) => ({
  step,
  outputs: new Map([["OUT", tensor]]),
  parameters: {},
});

test("an answer of many empty strings counts what its elements hold, and is not kept past the bound", () => {
  const answers = new StepAnswers();
  // 10,000 empty strings: no bytes of text, about 1.9 MB of elements.
  answers.record(answer(1, bytesTensor(10_000)));
  assert.equal(answers.get(1), undefined, "too large to keep");
  // A few hundred fit; the oldest go once they no longer do together.
  const fits = Math.floor(STEP_ANSWERS_MAX_BYTES / 2 / 200);
  answers.record(answer(2, bytesTensor(fits)));
  answers.record(answer(3, bytesTensor(fits)));
  answers.record(answer(4, bytesTensor(fits)));
  assert.deepEqual(
    answers.all.map((a) => a.step),
    [3, 4],
  );
});

test("numeric answers are kept up to the count", () => {
  const answers = new StepAnswers();
  for (let step = 1; step <= STEP_ANSWERS_KEPT + 2; step++)
    answers.record(answer(step, { datatype: "FP32", shape: [4], data: new Float32Array(4) }));
  assert.deepEqual(
    answers.all.map((a) => a.step),
    [3, 4, 5, 6],
  );
});
