import { UsageError } from "./usage-error.ts";

// A flag (or variable) that takes one of a few words; any other is refused at start,
// naming where it came from, the words it takes and the one given. The SageMaker flags
// and variables are refused in the words of Triton's SageMaker image (docker/sagemaker/serve:
// "Invalid SAGEMAKER_TRITON_INFERENCE_TYPE 'x'. Must be one of: infer, generate,
// generate_stream"), which a deployment moved from that image may look for in its logs;
// every other flag in seqserve's.

/** Whose words a refusal is in. */
export type ChoiceWording = "seqserve" | "triton-sagemaker-image";

/** `value` if it is one of `allowed`; else a usage error naming `source` ("--log-format", a variable). */
export function oneOf<T extends string>(
  source: string,
  value: string,
  allowed: readonly T[],
  wording: ChoiceWording = "seqserve",
): T {
  if ((allowed as readonly string[]).includes(value)) return value as T;
  const words = allowed.join(", ");
  throw new UsageError(
    wording === "seqserve"
      ? `${source} must be one of ${words}, got '${value}'`
      : `Invalid ${source} '${value}'. Must be one of: ${words}`,
  );
}
