import { invalidArg, type ServerError } from "../errors.ts";
import type { Parameters, ParameterValue, SequenceControl, SequenceId } from "../infer.ts";

// The KServe v2 sequence extension's request parameters, read the way Triton reads them:
// `sequence_id` is an unsigned integer or a string (0 and "" mean "no sequence id"),
// `sequence_start` / `sequence_end` are booleans, `timeout` is in microseconds. seqserve
// adds `sequence_step`, the request's place in its sequence (1 for the START), with which
// a retried step is answered from its recorded answer instead of running twice.

const UINT64_MAX = (1n << 64n) - 1n;

/** The request parameters Triton reads itself, each of one JSON type (`priority` too). */
export type TritonSequenceParameter =
  | "sequence_id"
  | "sequence_start"
  | "sequence_end"
  | "timeout"
  | "priority";

export function isTritonSequenceParameter(name: string): name is TritonSequenceParameter {
  return (
    name === "sequence_id" ||
    name === "sequence_start" ||
    name === "sequence_end" ||
    name === "timeout" ||
    name === "priority"
  );
}

/**
 * A sequence parameter of a type it cannot have, in Triton's words: its HTTP frontend adds
 * to "Unable to parse '<name>'" the reason its JSON reader gives for the type it expected
 * (a sequence_id that is no uint64 is read as a string). Typed gRPC parameters are checked
 * by their frontend before they come here, so only JSON bodies meet these words.
 */
export function unparsableSequenceParameter(name: TritonSequenceParameter): ServerError {
  const expected =
    name === "sequence_id"
      ? "non-string as string"
      : name === "timeout" || name === "priority"
        ? "non-unsigned-integer as unsigned-integer"
        : "non-boolean as boolean";
  return invalidArg(`Unable to parse '${name}': attempt to access JSON ${expected}`);
}

function parseSequenceId(value: ParameterValue): SequenceId | undefined {
  if (typeof value === "string") return value === "" ? undefined : value;
  if (typeof value === "bigint") {
    if (value < 0n || value > UINT64_MAX) throw unparsableSequenceParameter("sequence_id");
    return value === 0n ? undefined : value;
  }
  if (typeof value === "number" && Number.isSafeInteger(value) && value >= 0) {
    return value === 0 ? undefined : BigInt(value);
  }
  throw unparsableSequenceParameter("sequence_id");
}

function parseFlag(parameters: Parameters, name: "sequence_start" | "sequence_end"): boolean {
  const value = parameters[name];
  if (value === undefined) return false;
  if (typeof value !== "boolean") throw unparsableSequenceParameter(name);
  return value;
}

function parseTimeout(value: ParameterValue | undefined): number | undefined {
  if (value === undefined) return undefined;
  const n = typeof value === "bigint" ? Number(value) : value;
  if (typeof n !== "number" || !Number.isInteger(n) || n < 0) throw unparsableSequenceParameter("timeout");
  return n === 0 ? undefined : n;
}

/** `sequence_step`: a whole number from 1 (JSON number, int64 or uint64 parameter). */
export function parseSequenceStep(value: ParameterValue | undefined): number | undefined {
  if (value === undefined) return undefined;
  const n = typeof value === "bigint" && value <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(value) : value;
  if (typeof n !== "number" || !Number.isSafeInteger(n) || n < 1) {
    throw invalidArg(
      "Unable to parse 'sequence_step': expected the request's place in its sequence, a whole number from 1 (1 for the START)",
    );
  }
  return n;
}

/** The sequence fields of a request, or undefined when it carries none. */
export function readSequenceControl(parameters: Parameters): SequenceControl | undefined {
  const hasAny =
    parameters.sequence_id !== undefined ||
    parameters.sequence_start !== undefined ||
    parameters.sequence_end !== undefined ||
    parameters.timeout !== undefined ||
    parameters.sequence_step !== undefined;
  if (!hasAny) return undefined;
  const raw = parameters.sequence_id;
  const step = parseSequenceStep(parameters.sequence_step);
  return {
    id: raw === undefined ? undefined : parseSequenceId(raw),
    start: parseFlag(parameters, "sequence_start"),
    end: parseFlag(parameters, "sequence_end"),
    timeoutUs: parseTimeout(parameters.timeout),
    ...(step === undefined ? {} : { step }),
  };
}

/** How an id is written in messages and listings: uint64 ids in decimal, strings as they are. */
export function formatSequenceId(id: SequenceId): string {
  return typeof id === "bigint" ? id.toString() : id;
}
