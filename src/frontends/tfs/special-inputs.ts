import { invalidArg, ServerError } from "../../core/errors.ts";
import type { SequenceControl, SequenceId } from "../../core/infer.ts";
import { OVMS_MESSAGES, ovmsInvalid } from "./error-status.ts";

// OpenVINO Model Server's two special inputs of a stateful model's request:
// `sequence_id` (uint64; 0 = none) and `sequence_control_input` (uint32: 0 none, 1 start,
// 2 end), each a tensor of shape [1]. Read in OVMS's order and with its errors; a request
// refused here changes nothing on the server. What they mean for the sequence (unknown
// id, id in use, no room) is the core's exclusive admission.
//
// seqserve adds a third, `sequence_step` (uint64, shape [1]): the request's place in its
// sequence (1 for the start), for exactly-once retries; and takes the id from the
// X-Sequence-Id header / sequence-id metadata when the request has no `sequence_id`
// input (a load balancer routes by it).

export const SEQUENCE_ID_INPUT = "sequence_id";
export const SEQUENCE_CONTROL_INPUT = "sequence_control_input";
export const SEQUENCE_STEP_INPUT = "sequence_step";

/** OVMS's own two: every stateful model's requests carry them. */
const OVMS_SPECIAL_INPUTS: ReadonlySet<string> = new Set([SEQUENCE_ID_INPUT, SEQUENCE_CONTROL_INPUT]);
const WITH_STEP: ReadonlySet<string> = new Set([...OVMS_SPECIAL_INPUTS, SEQUENCE_STEP_INPUT]);

/** Any name that may carry a sequence field rather than data, whatever the model. */
export const SPECIAL_INPUTS = WITH_STEP;

/**
 * The inputs of `model`'s requests that carry sequence fields rather than data. OVMS
 * reserves only its two: a model with a data input of its own named `sequence_step` keeps
 * it, and its requests are not numbered.
 */
export function specialInputsOf(model: {
  readonly inputs: readonly { readonly name: string }[];
}): ReadonlySet<string> {
  return model.inputs.some((input) => input.name === SEQUENCE_STEP_INPUT) ? OVMS_SPECIAL_INPUTS : WITH_STEP;
}

const NO_CONTROL = 0n;
const SEQUENCE_START = 1n;
const SEQUENCE_END = 2n;

/** A special input as the wire gave it: its dims (undefined: no shape) and its values. */
export interface SpecialInput {
  readonly dims: readonly number[] | undefined;
  /** The values found where OVMS reads them (uint64_val / uint32_val); undefined when absent there. */
  readonly values: readonly bigint[] | undefined;
}

/** OVMS's shape checks: shape information present, one dimension, of size 1. */
function checkShape(name: string, input: SpecialInput): void {
  if (input.dims === undefined || input.dims.length === 0) throw ovmsInvalid("no_shape");
  if (input.dims.length !== 1) throw ovmsInvalid("dimensions", `Required shape for ${name} is: (1)`);
  if (input.dims[0] !== 1) throw ovmsInvalid("shape", `Required shape for ${name} is: (1)`);
}

/**
 * The sequence fields of a request to a stateful model, from its special inputs (either
 * may be absent). Throws OVMS's INVALID_ARGUMENT errors.
 */
export function readSpecialInputs(
  id: SpecialInput | undefined,
  control: SpecialInput | undefined,
  step?: SpecialInput,
  routedId?: SequenceId,
): SequenceControl {
  let sequenceId = typeof routedId === "bigint" ? routedId : 0n;
  let controlValue = 0n;
  if (id !== undefined) {
    checkShape(SEQUENCE_ID_INPUT, id);
    if (id.values?.length !== 1) throw ovmsInvalid("id_field");
    sequenceId = id.values[0]!;
    if (typeof routedId === "bigint" && routedId !== sequenceId) {
      throw invalidArg(
        `the sequence_id input is ${sequenceId}, but the X-Sequence-Id header (or sequence-id metadata), by which a load balancer routes the request, names ${routedId}`,
      );
    }
  }
  let stepValue: number | undefined;
  if (step !== undefined) {
    checkShape(SEQUENCE_STEP_INPUT, step);
    const value = step.values?.length === 1 ? step.values[0]! : 0n;
    if (value < 1n || value > BigInt(Number.MAX_SAFE_INTEGER)) {
      throw invalidArg(
        "sequence_step must be one uint64 (uint64_val over gRPC): the request's place in its sequence, from 1 for the start",
      );
    }
    stepValue = Number(value);
  }
  if (control !== undefined) {
    checkShape(SEQUENCE_CONTROL_INPUT, control);
    if (control.values?.length !== 1) throw ovmsInvalid("control_field");
    controlValue = control.values[0]!;
  }
  if (controlValue !== NO_CONTROL && controlValue !== SEQUENCE_START && controlValue !== SEQUENCE_END) {
    throw ovmsInvalid("control_value");
  }
  const start = controlValue === SEQUENCE_START;
  if (!start && sequenceId === 0n) throw missingId();
  return {
    id: sequenceId === 0n ? undefined : sequenceId,
    start,
    end: controlValue === SEQUENCE_END,
    timeoutUs: undefined,
    admission: "exclusive",
    ...(stepValue === undefined ? {} : { step: stepValue }),
  };
}

function missingId(): ServerError {
  return new ServerError("INVALID_ARG", OVMS_MESSAGES.sequence_id_missing, {
    reason: "sequence_id_missing",
  });
}
