import { invalidArg } from "../../core/errors.ts";
import type { InferRequest, InferResponse, SequenceControl, SequenceId } from "../../core/infer.ts";
import type { ModelRegistry, ServedModel } from "../../core/model.ts";
import type { Tensor } from "../../core/tensor.ts";
import { scalarInputsAsConfigured } from "./model-scalars.ts";
import { readSpecialInputs, type SpecialInput } from "./special-inputs.ts";

// What REST and gRPC Predict share once each has read its wire format: finding the model
// (by version), turning the special inputs of a stateful model into the
// request's sequence fields, and the `sequence_id` every response of a stateful model
// carries.

/** The one signature a seqserve model has, under TF-Serving's default name. */
export const DEFAULT_SIGNATURE = "serving_default";

export interface ModelSelector {
  readonly name: string;
  /** undefined: the highest available version. */
  readonly version?: string | undefined;
  /** A version label: read and not used, as OVMS does (the default version answers). */
  readonly label?: string | undefined;
}

/** The model a request names; its `signature_name` is not read, as OVMS does not read it. */
export function findModel(registry: ModelRegistry, selector: ModelSelector): ServedModel {
  if (selector.name === "") throw invalidArg("the request names no model (model_spec.name is empty)");
  return registry.model(selector.name, selector.version);
}

/** A stateful model's requests carry the special inputs; a stateless one's do not. */
export const isStateful = (model: ServedModel): boolean => model.sequences !== undefined;

/**
 * A stateful model's sequence fields from its special inputs (OVMS reads them before it
 * looks at the data inputs, so their errors come first); undefined for a stateless model.
 */
export function sequenceOf(
  model: ServedModel,
  id: SpecialInput | undefined,
  control: SpecialInput | undefined,
  step?: SpecialInput,
  routedId?: SequenceId,
): SequenceControl | undefined {
  return isStateful(model) ? readSpecialInputs(id, control, step, routedId) : undefined;
}

export interface PredictCall {
  readonly model: ServedModel;
  /** The data inputs (special inputs taken out). */
  readonly inputs: Map<string, Tensor>;
  readonly sequence: SequenceControl | undefined;
  /** Outputs to return; undefined = all. */
  readonly outputs: readonly string[] | undefined;
  readonly signal?: AbortSignal | undefined;
  /** The caller (its API key's name), for the sequences it starts. */
  readonly principal?: string | undefined;
}

export interface PredictResult {
  readonly response: InferResponse;
  /** The id to answer in the `sequence_id` output (stateful models), chosen or assigned. */
  readonly sequenceId: bigint | undefined;
}

export async function predict(call: PredictCall): Promise<PredictResult> {
  const { sequence } = call;
  const request: InferRequest = {
    id: "",
    inputs: scalarInputsAsConfigured(call.model.config, call.inputs),
    outputs: call.outputs,
    parameters: {},
    sequence,
    // A stateful request's client that gives up (a deadline, a cancel, a closed
    // connection) drops the request if it has not run; its sequence goes on, as in OVMS
    // (the "exclusive" admission; Triton would end the sequence).
    ...(call.signal === undefined ? {} : { signal: call.signal }),
    principal: call.principal,
  };
  const response = await call.model.infer(request);
  const assigned = response.parameters.sequence_id;
  const sequenceId =
    sequence === undefined ? undefined : typeof assigned === "bigint" ? assigned : (sequence.id as bigint);
  return { response, sequenceId };
}
