import type { ServedModel } from "../src/core/model.ts";
import { classifyOutputs } from "../src/frontends/common/kserve/classification.ts";

// What the classification extension costs the main thread: the top k classes of one
// output of a million FP32 values (Triton's bound per batch entry), against sorting them
// all. Prints the milliseconds of 3 runs after a warm-up.
//
//   node --import tsx bench/classification.ts

const model = {
  name: "m",
  version: "1",
  config: { maxBatchSize: 0 },
  inputs: [],
  outputs: [],
} as unknown as ServedModel;
const count = 1_000_000;
const data = Float32Array.from({ length: count }, () => Math.random());
const response = {
  modelName: "m",
  modelVersion: "1",
  id: "",
  parameters: {},
  outputs: [{ name: "scores", datatype: "FP32" as const, shape: [count], data }],
};

for (const k of [5, 1000, 100_000]) {
  const runs: string[] = [];
  for (let run = 0; run < 4; run++) {
    const start = performance.now();
    classifyOutputs(response, { model, counts: new Map([["scores", k]]) });
    if (run > 0) runs.push((performance.now() - start).toFixed(1));
  }
  console.log(`k=${k}: ${runs.join(" / ")} ms`);
}
const start = performance.now();
Array.from({ length: count }, (_, i) => i).sort((a, b) => data[b]! - data[a]! || a - b);
console.log(`sorting all ${count} values: ${(performance.now() - start).toFixed(0)} ms`);
