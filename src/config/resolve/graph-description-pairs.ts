import type { StatePair } from "./model-parameters.ts";

// Where Triton's ONNX stateful backend finds a model's state pairs when its config has no
// `state_pairs`: in the ONNX graph's description, read as its StateTensor::InitTensorNames
// reads it (onnx_model_runner.h). A line naming both "InputState" and "OutputState" (then,
// separately, both "PastValueInput" and "PastValueOutput") lists pairs after the input's
// word, each "<<<first, second>>>", split at its first comma; the names may
// carry ":" and the tensor's dimensions (without commas), which are dropped. The pair's
// input is the name on the side of the word that comes first: "OutputState … InputState …
// <<<out, in>>>" pairs in with out.

/** The words the backend looks for, input's first, in the order it looks for them. */
const KEYWORDS: readonly (readonly [string, string])[] = [
  ["InputState", "OutputState"],
  ["PastValueInput", "PastValueOutput"],
];

const PAIR = /<<<\s*([^,<>]*?)\s*,\s*([^<>]*?)\s*>>>/g;

/** A name without the ":…" the description may follow it with. */
const bareName = (name: string): string => name.split(":", 1)[0]!.trim();

/** The state pairs the graph description lists, in the backend's order; none when it lists none. */
export function statePairsOfGraphDescription(description: string): StatePair[] {
  const pairs: StatePair[] = [];
  const lines = description.split("\n");
  for (const [inputWord, outputWord] of KEYWORDS) {
    for (const line of lines) {
      const inputAt = line.indexOf(inputWord);
      const outputAt = line.indexOf(outputWord);
      if (inputAt === -1 || outputAt === -1) continue;
      const inputFirst = inputAt < outputAt;
      for (const match of line.slice(inputAt).matchAll(PAIR)) {
        const first = bareName(match[1]!);
        const second = bareName(match[2]!);
        if (first === "" || second === "") continue;
        pairs.push(inputFirst ? { input: first, output: second } : { input: second, output: first });
      }
    }
  }
  return pairs;
}

/** The pairs as a `state_pairs` value says them, for messages. */
export const statePairsText = (pairs: readonly StatePair[]): string =>
  pairs.map((pair) => `<<<${pair.input}, ${pair.output}>>>`).join(" ");
