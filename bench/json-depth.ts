// What the JSON depth check (src/frontends/common/json-depth.ts) costs beside JSON.parse,
// on the bodies clients send: a Silero VAD request (flat data, a few brackets), TF-Serving
// rows (more than 512 brackets: read character by character), and BYTES strings holding
// brackets; and what the check saves on a body nested a million deep, which it refuses
// without parsing.
//
//   node --import tsx bench/json-depth.ts [--rounds 3]
import { parseArgs } from "node:util";
import { checkJsonDepth } from "../src/frontends/common/json-depth.ts";

const { values } = parseArgs({ options: { rounds: { type: "string", default: "3" } } });

const floats = (n: number) => Array.from({ length: n }, () => Math.random() * 2 - 1);
const BODIES: Record<string, string> = {
  "Silero request": JSON.stringify({
    parameters: { sequence_id: 7 },
    inputs: [
      { name: "input", datatype: "FP32", shape: [1, 512], data: floats(512) },
      { name: "sr", datatype: "INT64", shape: [], data: [16000] },
    ],
  }),
  "2,000 rows of 10": JSON.stringify({ instances: Array.from({ length: 2000 }, () => floats(10)) }),
  "10,000 strings with brackets": JSON.stringify({
    inputs: [
      {
        name: "T",
        datatype: "BYTES",
        shape: [10_000],
        data: Array.from({ length: 10_000 }, (_, i) => `[token ${i}] "quoted" {x}`),
      },
    ],
  }),
};
const DEEP = `{"inputs":${"[".repeat(1_000_000)}1${"]".repeat(1_000_000)}}`;

/** Mean milliseconds of `run` over enough calls for about 200 ms. */
function timed(run: () => void): number {
  run();
  let calls = 0;
  const start = performance.now();
  while (performance.now() - start < 200) {
    run();
    calls++;
  }
  return (performance.now() - start) / calls;
}

const refused = (text: string): boolean => {
  try {
    checkJsonDepth(text);
    return false;
  } catch {
    return true;
  }
};

for (let round = 1; round <= Number(values.rounds); round++) {
  for (const [name, text] of Object.entries(BODIES)) {
    const check = timed(() => checkJsonDepth(text));
    const parse = timed(() => JSON.parse(text));
    console.log(
      `round ${round}, ${name} (${(text.length / 1024).toFixed(0)} KB): check ${(check * 1000).toFixed(1)} µs, JSON.parse ${(parse * 1000).toFixed(1)} µs (${((100 * check) / parse).toFixed(0)} %)`,
    );
  }
  const check = timed(() => refused(DEEP));
  const start = performance.now();
  JSON.parse(DEEP);
  const parse = performance.now() - start;
  console.log(
    `round ${round}, nested 1,000,000 deep (${(DEEP.length / 1e6).toFixed(0)} MB): refused in ${(check * 1000).toFixed(1)} µs; JSON.parse ${parse.toFixed(0)} ms`,
  );
}
