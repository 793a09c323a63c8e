import type { TensorNameMapping } from "../config/ovms-mapping-config.ts";
import type { OpenedModel } from "../core/backend.ts";
import { invalidArg } from "../core/errors.ts";
import type { ExecutionResult, ModelExecutor } from "../core/executor.ts";
import type { ModelIo, ModelTensorInfo } from "../core/model-io.ts";
import type { Tensor } from "../core/tensor.ts";

// A model served under other names for its tensors (OVMS's mapping_config.json): the
// opened model's description carries the clients' names, so the config completed from it,
// every frontend, its metadata, warmup and the sequence batcher's state all use them; its
// instances take and give the clients' names and run the model with its own.

/** The opened model under the mapping's names, and the names the mapping gives that the model does not have. */
export function withClientNames(
  modelName: string,
  opened: OpenedModel & { readonly io: ModelIo },
  mapping: TensorNameMapping,
): { readonly opened: OpenedModel & { readonly io: ModelIo }; readonly unknown: readonly string[] } {
  const inputs = renamed(modelName, "input", opened.io.inputs, mapping.inputs, mapping.file);
  const outputs = renamed(modelName, "output", opened.io.outputs, mapping.outputs, mapping.file);
  const known = (list: readonly ModelTensorInfo[]) => new Set(list.map((t) => t.name));
  const unknown = [
    ...[...mapping.inputs.keys()].filter((n) => !known(opened.io.inputs).has(n)).map((n) => `input '${n}'`),
    ...[...mapping.outputs.keys()]
      .filter((n) => !known(opened.io.outputs).has(n))
      .map((n) => `output '${n}'`),
  ];
  const toModel = (names: ReadonlyMap<string, string>) =>
    new Map([...names].map(([model, client]) => [client, model]));
  const inputsToModel = toModel(mapping.inputs);
  const outputsToModel = toModel(mapping.outputs);
  const outputsToClient = mapping.outputs;
  const executors = opened.executors.map(
    (executor): ModelExecutor => ({
      name: executor.name,
      run: async (given, outputNames): Promise<ExecutionResult> => {
        const modelInputs = new Map<string, Tensor>();
        for (const [name, tensor] of given) modelInputs.set(inputsToModel.get(name) ?? name, tensor);
        const result = await executor.run(
          modelInputs,
          outputNames.map((name) => outputsToModel.get(name) ?? name),
        );
        const clientOutputs = new Map<string, Tensor>();
        for (const [name, tensor] of result.outputs)
          clientOutputs.set(outputsToClient.get(name) ?? name, tensor);
        return { ...result, outputs: clientOutputs };
      },
      close: () => executor.close(),
    }),
  );
  return { opened: { ...opened, io: { ...opened.io, inputs, outputs }, executors }, unknown };
}

function renamed(
  modelName: string,
  kind: "input" | "output",
  tensors: readonly ModelTensorInfo[],
  names: ReadonlyMap<string, string>,
  file: string,
): ModelTensorInfo[] {
  const seen = new Map<string, string>();
  return tensors.map((tensor) => {
    const name = names.get(tensor.name) ?? tensor.name;
    const other = seen.get(name);
    if (other !== undefined) {
      throw invalidArg(
        `model '${modelName}': '${file}' gives ${kind}s '${other}' and '${tensor.name}' the same name '${name}'`,
      );
    }
    seen.set(name, tensor.name);
    return name === tensor.name ? tensor : { ...tensor, name };
  });
}

const PAIR = /<<<\s*([^,<>]*?)\s*,\s*([^,<>]*?)\s*>>>/g;

/** `state_pairs` ("<<<in, out>>> …", the model's names) in the clients' names. */
export function statePairsInClientNames(pairs: string, mapping: TensorNameMapping): string {
  return pairs.replace(
    PAIR,
    (_, input: string, output: string) =>
      `<<<${mapping.inputs.get(input) ?? input}, ${mapping.outputs.get(output) ?? output}>>>`,
  );
}

/** `shared_inputs` ("a, b", the model's names) in the clients' names. */
export function sharedInputsInClientNames(inputs: string, mapping: TensorNameMapping): string {
  return inputs
    .split(",")
    .map((name) => name.trim())
    .filter((name) => name !== "")
    .map((name) => mapping.inputs.get(name) ?? name)
    .join(",");
}
