// What writing float outputs as JSON costs the main thread (src/frontends/common/kserve/
// json-tensor.ts): jsonTensorData, against TypedArray#join (how it wrote them before), on
// arrays of values neither has seen (a model's outputs differ from one request to the
// next, so V8's number-to-string cache does not help). Both must give the same text.
//
//   node --import tsx bench/json-floats.ts [--rounds 3] [--sizes 257,512,65536]
import assert from "node:assert/strict";
import { parseArgs } from "node:util";
import { jsonTensorData } from "../src/frontends/common/kserve/json-tensor.ts";

const { values } = parseArgs({
  options: { rounds: { type: "string", default: "3" }, sizes: { type: "string", default: "257,512,65536" } },
});

for (const size of values.sizes.split(",").map(Number)) {
  // Enough arrays for about 4 million elements a round, each written once.
  const arrays = Array.from({ length: Math.max(4, Math.floor(4e6 / size)) }, () =>
    Float32Array.from({ length: size }, () => Math.random() * 0.2 - 0.1),
  );
  const ways = {
    join: (data: Float32Array) => `[${data.join(",")}]`,
    jsonTensorData: (data: Float32Array) => jsonTensorData({ datatype: "FP32", shape: [size], data }),
  };
  assert.equal(ways.jsonTensorData(arrays[0]!), ways.join(arrays[0]!));
  for (let round = 1; round <= Number(values.rounds); round++) {
    const figures = Object.entries(ways).map(([name, write]) => {
      const start = performance.now();
      for (const data of arrays) write(data);
      const ns = ((performance.now() - start) * 1e6) / (arrays.length * size);
      return `${name} ${ns.toFixed(0)} ns`;
    });
    console.log(`${size} floats, round ${round}: ${figures.join(", ")} an element`);
  }
}
