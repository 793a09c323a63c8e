import { invalidArg } from "../errors.ts";
import type { SequenceId } from "../infer.ts";
import type { ControlInputConfig, ModelConfig } from "../model-config.ts";
import { requestLabel } from "../request-label.ts";
import type { Tensor } from "../tensor.ts";

// The control tensors the sequence batcher feeds the model (Triton `control_input`):
// START / END / READY flags and the CORRID correlation id, one row per batch slot,
// shaped [batch, 1] for a batching model and [1] otherwise.

/** One row of control values; `undefined` marks a padding row (READY false, CORRID 0). */
export interface ControlRow {
  readonly id: SequenceId;
  readonly start: boolean;
  readonly end: boolean;
}

const encoder = new TextEncoder();

/** Whether the model's CORRID control carries string ids (TYPE_STRING): its assigned ids are strings too. */
export function takesStringIds(config: ModelConfig): boolean {
  return config.sequenceBatching?.controlInputs.find((c) => c.kind === "CORRID")?.datatype === "BYTES";
}

/**
 * Refuses an id whose type the model's CORRID control cannot carry, in Triton's words: for
 * a request, they open with its id, as Triton's other request checks (requestLabel); an id
 * checked before any request (a WebSocket stream's, as it opens) has no request to name.
 */
export function checkCorrelationIdType(config: ModelConfig, id: SequenceId, requestId?: string): void {
  const corrid = config.sequenceBatching?.controlInputs.find((c) => c.kind === "CORRID");
  if (corrid === undefined) return;
  const given = typeof id === "string" ? "BYTES" : "UINT64";
  const wantsString = corrid.datatype === "BYTES";
  if ((typeof id === "string") !== wantsString) {
    throw invalidArg(
      `${requestId === undefined ? "" : requestLabel(requestId)}sequence batching control '${corrid.name}' data-type is '${given}', but model '${config.name}' expects '${corrid.datatype}'`,
    );
  }
}

function flagTensor(control: ControlInputConfig, values: readonly boolean[], shape: number[]): Tensor {
  const [f, t] = control.falseTrue ?? [0, 1];
  switch (control.datatype) {
    case "FP32":
      return { datatype: "FP32", shape, data: Float32Array.from(values, (v) => (v ? t : f)) };
    case "BOOL":
      return { datatype: "BOOL", shape, data: Uint8Array.from(values, (v) => ((v ? t : f) ? 1 : 0)) };
    default:
      return { datatype: "INT32", shape, data: Int32Array.from(values, (v) => (v ? t : f)) };
  }
}

function corridTensor(
  control: ControlInputConfig,
  rows: readonly (ControlRow | undefined)[],
  shape: number[],
): Tensor {
  const ids = rows.map((r) => r?.id);
  switch (control.datatype) {
    case "BYTES":
      return {
        datatype: "BYTES",
        shape,
        data: ids.map((id) => (typeof id === "string" ? encoder.encode(id) : new Uint8Array(0))),
      };
    case "INT64":
      return {
        datatype: "INT64",
        shape,
        data: BigInt64Array.from(ids, (id) => BigInt.asIntN(64, asBig(id))),
      };
    case "UINT32":
      return {
        datatype: "UINT32",
        shape,
        data: Uint32Array.from(ids, (id) => Number(BigInt.asUintN(32, asBig(id)))),
      };
    case "INT32":
      return {
        datatype: "INT32",
        shape,
        data: Int32Array.from(ids, (id) => Number(BigInt.asIntN(32, asBig(id)))),
      };
    default:
      return { datatype: "UINT64", shape, data: BigUint64Array.from(ids, (id) => asBig(id)) };
  }
}

const asBig = (id: SequenceId | undefined): bigint => (typeof id === "bigint" ? id : 0n);

export function controlTensors(
  controls: readonly ControlInputConfig[],
  rows: readonly (ControlRow | undefined)[],
  batching: boolean,
): Map<string, Tensor> {
  const shape = batching ? [rows.length, 1] : [1];
  const tensors = new Map<string, Tensor>();
  for (const control of controls) {
    if (!control.fed) continue;
    switch (control.kind) {
      case "START":
        tensors.set(
          control.name,
          flagTensor(
            control,
            rows.map((r) => r?.start ?? false),
            shape,
          ),
        );
        break;
      case "END":
        tensors.set(
          control.name,
          flagTensor(
            control,
            rows.map((r) => r?.end ?? false),
            shape,
          ),
        );
        break;
      case "READY":
        tensors.set(
          control.name,
          flagTensor(
            control,
            rows.map((r) => r !== undefined),
            shape,
          ),
        );
        break;
      case "CORRID":
        tensors.set(control.name, corridTensor(control, rows, shape));
        break;
    }
  }
  return tensors;
}
