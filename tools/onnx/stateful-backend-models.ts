import type { DataType } from "../../src/core/datatype.ts";
import { OnnxModelBuilder } from "./onnx-model-builder.ts";

// Models in the ONNX stateful backend's conventions (after its accumulate_* and mixed_io_*
// examples, written here from their description): each input is [seq, batch, width] with
// the batch in the middle, each state is [batch, width] and is fed back from the matching
// output, and a boolean `ResetSequence` [batch, 1] makes the model start from zeros.
//
// Per pair (input X, state S, width W):
//   S' = S * !reset + sum over seq of X          (numbers)
//   S' = (S and !reset) or any over seq of X     (booleans)
//   Output = X + S' (broadcast over seq)         (booleans: X or S')
// FP16 and INT8 are computed in FP32 and INT32 and cast back, as a CPU model would.

export interface StatefulPair {
  /** Suffix of the tensor names: Input_<suffix>, Output_<suffix>, Accumulate_In_<suffix>, Accumulate_Out_<suffix>; "" for the plain names. */
  readonly suffix: string;
  readonly datatype: DataType;
}

/** The type a pair is computed in. */
function computeType(datatype: DataType): DataType {
  if (datatype === "FP16") return "FP32";
  if (datatype === "INT8") return "INT32";
  return datatype;
}

const ONNX_TYPE: Partial<Record<DataType, number>> = { FP32: 1, INT32: 6, INT8: 3, FP16: 10, BOOL: 9 };

export function tensorNames(pair: StatefulPair): {
  input: string;
  output: string;
  stateIn: string;
  stateOut: string;
} {
  const s = pair.suffix === "" ? "" : `_${pair.suffix}`;
  return {
    input: `Input${s}`,
    output: `Output${s}`,
    stateIn: `Accumulate_In${s}`,
    stateOut: `Accumulate_Out${s}`,
  };
}

/**
 * A model with one or more accumulating pairs, each of width `width`; `description` is
 * its graph's (where the backend may read the state pairs).
 */
export function statefulBackendModel(
  pairs: readonly StatefulPair[],
  width: number,
  description = "",
): Uint8Array {
  const b = new OnnxModelBuilder({ opset: 17 }).description(description);
  for (const pair of pairs) {
    const n = tensorNames(pair);
    b.input(n.input, pair.datatype, ["seq", "batch", width]).input(n.stateIn, pair.datatype, [
      "batch",
      width,
    ]);
  }
  b.input("ResetSequence", "BOOL", ["batch", 1]);
  for (const pair of pairs) {
    const n = tensorNames(pair);
    b.output(n.output, pair.datatype, ["seq", "batch", width]).output(n.stateOut, pair.datatype, [
      "batch",
      width,
    ]);
  }
  b.initializer("seq_axis", "INT64", [1], [0]).node("Not", ["ResetSequence"], ["keep"]);
  for (const [i, pair] of pairs.entries()) {
    const n = tensorNames(pair);
    const t = computeType(pair.datatype);
    const cast = (from: string, to: DataType, out: string): string => {
      if (t === pair.datatype && to === t) return from;
      b.node("Cast", [from], [out], { to: ONNX_TYPE[to]! });
      return out;
    };
    const x = cast(n.input, t, `x${i}`);
    const s = cast(n.stateIn, t, `s${i}`);
    if (t === "BOOL") {
      b.node("And", [s, "keep"], [`kept${i}`])
        .node("Cast", [x], [`xi${i}`], { to: ONNX_TYPE.INT32! })
        .node("ReduceMax", [`xi${i}`], [`anyi${i}`], { axes: [0], keepdims: 0 })
        .node("Cast", [`anyi${i}`], [`any${i}`], { to: ONNX_TYPE.BOOL! })
        .node("Or", [`kept${i}`, `any${i}`], [`acc${i}`])
        .node("Or", [x, `acc${i}`], [`out${i}`]);
    } else {
      b.node("Cast", ["keep"], [`keep${i}`], { to: ONNX_TYPE[t]! })
        .node("Mul", [s, `keep${i}`], [`kept${i}`])
        .node("ReduceSum", [x, "seq_axis"], [`sum${i}`], { keepdims: 0 })
        .node("Add", [`kept${i}`, `sum${i}`], [`acc${i}`])
        .node("Add", [x, `acc${i}`], [`out${i}`]);
    }
    if (t === pair.datatype) {
      b.node("Identity", [`acc${i}`], [n.stateOut]).node("Identity", [`out${i}`], [n.output]);
    } else {
      b.node("Cast", [`acc${i}`], [n.stateOut], { to: ONNX_TYPE[pair.datatype]! }).node(
        "Cast",
        [`out${i}`],
        [n.output],
        { to: ONNX_TYPE[pair.datatype]! },
      );
    }
  }
  return b.toBytes();
}
