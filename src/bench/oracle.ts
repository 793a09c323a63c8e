import ort from "onnxruntime-node";
import { fromFloat16Array, toFloat16Array } from "../core/float16.ts";
import type { InferRequest } from "../core/infer.ts";
import { validateRequest } from "../core/request-validation.ts";
import { controlTensors } from "../core/sequence/control-tensors.ts";
import { initialStateTensor } from "../core/sequence/initial-state.ts";
import type { Exchange } from "./load-loop.ts";
import type { LocalModel } from "./local-model.ts";
import { toOrt } from "./ort-tensor.ts";
import type { Workload } from "./workload.ts";

// The oracle: each sequence (or request) the run sent, replayed alone in this process on
// ONNX Runtime — batch 1, the state fed back from the previous step, the control tensors
// the config asks for — and compared with what the server answered, value for value.

function values(data: unknown): number[] {
  return Array.from(data as ArrayLike<number | bigint>, (v) => Number(v));
}

export interface OracleReport {
  readonly checked: number;
  readonly mismatches: number;
  /** The first few mismatches, described. */
  readonly examples: string[];
}

export async function checkAgainstOracle(
  model: LocalModel,
  workload: Workload,
  exchanges: readonly Exchange[],
): Promise<OracleReport> {
  const { config, session } = model;
  const sequencing = config.sequenceBatching;
  const batching = config.maxBatchSize > 0;
  const bySequence = new Map<number, Exchange[]>();
  for (const e of exchanges) {
    const list = bySequence.get(e.sequence) ?? [];
    list.push(e);
    bySequence.set(e.sequence, list);
  }
  let checked = 0;
  let mismatches = 0;
  const examples: string[] = [];
  for (const [sequence, list] of bySequence) {
    list.sort((a, b) => a.step - b.step);
    let state = new Map<string, ort.Tensor>();
    for (const exchange of list) {
      const request: InferRequest = {
        id: "",
        inputs: workload.step(sequence, exchange.step),
        outputs: undefined,
        parameters: {},
        sequence: undefined,
      };
      const feeds: Record<string, ort.Tensor> = {};
      for (const [name, tensor] of validateRequest(config, request).inputs) feeds[name] = toOrt(tensor);
      if (sequencing !== undefined) {
        const start = exchange.step === 0;
        for (const s of sequencing.states) {
          feeds[s.inputName] = (!start && state.get(s.inputName)) || toOrt(initialStateTensor(s));
        }
        const controls = controlTensors(
          sequencing.controlInputs,
          [{ id: exchange.id ?? 0n, start, end: exchange.end }],
          batching,
        );
        for (const [name, tensor] of controls) feeds[name] = toOrt(tensor);
      }
      const result = await session.run(feeds);
      if (sequencing !== undefined) {
        const next = new Map<string, ort.Tensor>();
        for (const s of sequencing.states) {
          const output = result[s.outputName]!;
          // The server keeps FP32 state as FP16 when told to: the oracle rounds it the same way.
          next.set(
            s.inputName,
            sequencing.storeStatesAsFp16 && s.datatype === "FP32"
              ? new ort.Tensor(
                  "float32",
                  fromFloat16Array(toFloat16Array(output.data as Float32Array)),
                  output.dims,
                )
              : output,
          );
        }
        state = next;
      }
      for (const [name, served] of exchange.outputs) {
        const expected = result[name];
        checked++;
        if (expected === undefined) {
          // An output the model alone does not have: the server is not serving this model.
          mismatches++;
          if (examples.length < 5)
            examples.push(`sequence ${sequence} step ${exchange.step}: output '${name}' is not the model's`);
          continue;
        }
        const got = values(served.data);
        const want = values(expected.data);
        const same =
          got.length === want.length &&
          got.every((v, i) => v === want[i] || (Number.isNaN(v) && Number.isNaN(want[i])));
        if (!same) {
          mismatches++;
          if (examples.length < 5) {
            const at = got.findIndex((v, i) => v !== want[i]);
            examples.push(
              `sequence ${sequence} step ${exchange.step} output '${name}': element ${at} is ${got[at]}, expected ${want[at]}`,
            );
          }
        }
      }
    }
  }
  return { checked, mismatches, examples };
}
