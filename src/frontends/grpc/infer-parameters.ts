import { invalidArg } from "../../core/errors.ts";
import type { Parameters, ParameterValue } from "../../core/infer.ts";
import { checkReservedParameter, STREAM_RESERVED_PARAMETERS } from "../common/kserve/reserved-parameters.ts";
import { int64ToBigInt, int64ToInteger } from "./int64.ts";
import type { InferParameterMessage, ParameterMap } from "./messages.ts";

// InferParameter (a oneof of bool / int64 / string / double / uint64) ⇄ seqserve's
// protocol-free parameter values.
//
// Reading follows Triton's rules for the parameters it reserves, with its messages:
// `sequence_id` is int64_param (its bits read as uint64, so ids up to 2^64-1 travel in
// an int64) or string_param, and seqserve also accepts uint64_param; `sequence_start` and
// `sequence_end` are bool_param; `timeout` is int64_param (or uint64_param); `priority`
// int64_param (not negative) or uint64_param; of the names
// starting with `triton_`, only those Triton reserves for requests. Other integers become
// numbers when they are safe integers and bigints when they are not.
//
// Writing: integers go out as int64_param, because that is the only integer kind Triton
// itself sends in a response and the field its clients read `sequence_id` from; a uint64
// such as a server-assigned sequence id above 2^63 is sent as its int64 bit pattern,
// exactly as clients send it. Non-integral numbers go out as double_param.

function generic(name: string, parameter: InferParameterMessage): ParameterValue {
  switch (parameter.parameter_choice) {
    case "bool_param":
      return parameter.bool_param ?? false;
    case "int64_param":
      return int64ToInteger(parameter.int64_param ?? 0, false);
    case "uint64_param":
      return int64ToInteger(parameter.uint64_param ?? 0, true);
    case "double_param":
      return parameter.double_param ?? 0;
    case "string_param":
      return parameter.string_param ?? "";
    default:
      throw invalidArg(`parameter '${name}' has no value`);
  }
}

function sequenceId(parameter: InferParameterMessage): ParameterValue {
  switch (parameter.parameter_choice) {
    case "int64_param":
      return int64ToBigInt(parameter.int64_param ?? 0, true);
    case "uint64_param":
      return int64ToBigInt(parameter.uint64_param ?? 0, true);
    case "string_param":
      return parameter.string_param ?? "";
    default:
      throw invalidArg(
        "invalid value type for 'sequence_id' parameter, expected int64_param, uint64_param or string_param.",
      );
  }
}

function flag(name: string, parameter: InferParameterMessage): boolean {
  if (parameter.parameter_choice !== "bool_param") {
    throw invalidArg(`invalid value type for '${name}' parameter, expected bool_param.`);
  }
  return parameter.bool_param ?? false;
}

function timeout(parameter: InferParameterMessage): ParameterValue {
  const choice = parameter.parameter_choice;
  if (choice !== "int64_param" && choice !== "uint64_param") {
    throw invalidArg("invalid value type for 'timeout' parameter, expected int64_param.");
  }
  return int64ToInteger(parameter[choice] ?? 0, choice === "uint64_param");
}

function priority(parameter: InferParameterMessage): ParameterValue {
  const choice = parameter.parameter_choice;
  if (choice === "uint64_param") return int64ToInteger(parameter.uint64_param ?? 0, true);
  if (choice !== "int64_param") {
    throw invalidArg("invalid value type for 'priority' parameter, expected int64_param or uint64_param.");
  }
  const value = int64ToInteger(parameter.int64_param ?? 0, false);
  if (value < 0) throw invalidArg("invalid value for 'priority', expected value >= 0.");
  return value;
}

/** A request's parameters, with the sequence extension's typed the way Triton types them. */
export function readRequestParameters(map: ParameterMap | undefined): Parameters {
  const parameters: Record<string, ParameterValue> = {};
  if (map === undefined) return parameters;
  for (const name in map) {
    const parameter = map[name] as InferParameterMessage;
    checkReservedParameter(name, STREAM_RESERVED_PARAMETERS);
    switch (name) {
      case "sequence_id":
        parameters[name] = sequenceId(parameter);
        break;
      case "sequence_start":
      case "sequence_end":
        parameters[name] = flag(name, parameter);
        break;
      case "timeout":
        parameters[name] = timeout(parameter);
        break;
      case "priority":
        parameters[name] = priority(parameter);
        break;
      default:
        parameters[name] = generic(name, parameter);
    }
  }
  return parameters;
}

function writeParameter(value: ParameterValue): InferParameterMessage {
  switch (typeof value) {
    case "boolean":
      return { bool_param: value };
    case "string":
      return { string_param: value };
    case "bigint":
      return { int64_param: BigInt.asIntN(64, value).toString() };
    default:
      return Number.isSafeInteger(value) ? { int64_param: value } : { double_param: value };
  }
}

/** Response parameters as an InferParameter map; undefined when there are none. */
export function writeParameters(parameters: Parameters): Record<string, InferParameterMessage> | undefined {
  let map: Record<string, InferParameterMessage> | undefined;
  for (const name in parameters) {
    map ??= {};
    map[name] = writeParameter(parameters[name] as ParameterValue);
  }
  return map;
}
