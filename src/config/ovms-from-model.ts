import type { ModelIo, ModelTensorInfo } from "../core/model-io.ts";

// What a stateful model listed in OpenVINO Model Server's style (`"stateful": true`, or
// `--stateful` on the command line) leaves to be found from the model file.
//
// State: OpenVINO keeps a stateful model's state inside the model; an ONNX model carries
// it as inputs and outputs instead, paired `state -> stateN`. When the configuration
// names no pairs (`state_pairs` / `--state_pairs`), they are found by this rule, and
// refused when it does not give one clear answer:
//
//   an input and an output are a state pair when they have the same datatype and shapes
//   of the same rank that agree where both are known (models often leave an output's
//   dimensions all dynamic: Silero VAD's stateN is [-1,-1,-1] for state [2,-1,128]), and the output's name is the
//   input's name with a suffix `N`, `_out`, `Out`, `_new` or `_next`, or with one `in` /
//   `In` / `IN` word (at a `_`, `.`, `-` boundary or the start or end of the name) turned
//   into `out` / `Out` / `OUT` (h_in -> h_out, in_state -> out_state, cIn -> cOut).
//
// Every input and output may belong to one pair at most.
//
// Shared inputs: an input the model declares as a scalar (rank 0, such as Silero VAD's
// sample rate `sr`) has no room for a batch dimension, so one value serves a whole batch
// of sequences (seqserve's `shared_inputs`), unless the configuration names them.

const SUFFIXES = ["N", "_out", "Out", "_new", "_next"];

function compatibleShapes(a: ModelTensorInfo, b: ModelTensorInfo): boolean {
  if (a.shape === undefined || b.shape === undefined) return a.shape === b.shape;
  if (a.shape.length !== b.shape.length) return false;
  return a.shape.every((d, i) => d === b.shape![i] || d === -1 || b.shape![i] === -1);
}

/** The output names a state input `name` may pair with. */
function partnerNames(name: string): Set<string> {
  const names = new Set(SUFFIXES.map((s) => `${name}${s}`));
  const word = /(^|[_.-])(in|In|IN)(?=$|[_.-])|(^|[a-z0-9])(In)(?=$|[A-Z_.-])/g;
  for (const match of name.matchAll(word)) {
    const lead = match[1] ?? match[3] ?? "";
    const found = match[2] ?? match[4] ?? "";
    const out = found === "IN" ? "OUT" : found === "In" ? "Out" : "out";
    const at = match.index + lead.length;
    names.add(`${name.slice(0, at)}${out}${name.slice(at + found.length)}`);
  }
  return names;
}

export interface StatePairSearch {
  /** `<<<in, out>>> …`, the `state_pairs` spelling; undefined when no pair was found. */
  readonly pairs: string | undefined;
  /** Why the search gave no usable answer (no pair, or an ambiguous one); undefined when it did. */
  readonly problem: string | undefined;
}

/** The state pairs of `io` by the rule above. */
export function findStatePairs(modelName: string, io: ModelIo): StatePairSearch {
  const found: [ModelTensorInfo, ModelTensorInfo][] = [];
  for (const input of io.inputs) {
    const names = partnerNames(input.name);
    for (const output of io.outputs) {
      if (names.has(output.name) && output.datatype === input.datatype && compatibleShapes(input, output)) {
        found.push([input, output]);
      }
    }
  }
  const hint = `name them with state_pairs ("<<<state_input, state_output>>> ...") in the model's config, or --state_pairs on the command line`;
  const uses = new Map<string, number>();
  for (const [input, output] of found) {
    uses.set(`input '${input.name}'`, (uses.get(`input '${input.name}'`) ?? 0) + 1);
    uses.set(`output '${output.name}'`, (uses.get(`output '${output.name}'`) ?? 0) + 1);
  }
  const twice = [...uses].filter(([, n]) => n > 1).map(([what]) => what);
  if (twice.length > 0) {
    return {
      pairs: undefined,
      problem: `the state pairs of stateful model '${modelName}' are ambiguous: ${twice.join(", ")} could pair with more than one tensor (${found.map(([i, o]) => `${i.name} -> ${o.name}`).join(", ")}); ${hint}`,
    };
  }
  if (found.length === 0) {
    return {
      pairs: undefined,
      problem: `stateful model '${modelName}' has no input/output pair that looks like state (an output named like its input plus N, _out, Out, _new or _next, or in -> out, with the same datatype and a compatible shape); ${hint}`,
    };
  }
  return { pairs: found.map(([i, o]) => `<<<${i.name}, ${o.name}>>>`).join(" "), problem: undefined };
}

/** The model's scalar inputs, `shared_inputs` spelling ("a, b"); undefined when there is none. */
export function findSharedInputs(io: ModelIo): string | undefined {
  const scalars = io.inputs.filter((i) => i.shape !== undefined && i.shape.length === 0).map((i) => i.name);
  return scalars.length === 0 ? undefined : scalars.join(",");
}
