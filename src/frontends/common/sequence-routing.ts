import { invalidArg } from "../../core/errors.ts";
import type { InferRequest, SequenceId } from "../../core/infer.ts";
import type { ServedModel } from "../../core/model.ts";
import { formatSequenceId } from "../../core/sequence/sequence-parameters.ts";

// Replicas behind a load balancer: the balancer must send every request of a sequence to
// the same replica, and it can only hash on what it sees without parsing bodies — a
// header. Every frontend therefore also takes the sequence id from one: X-Sequence-Id
// over HTTP (KServe, TF-Serving REST, generate, WebSocket upgrades), `sequence-id`
// metadata over gRPC (KServe and TF-Serving); SageMaker's session header is the session
// id already. A request whose body names no id takes the header's (decimal digits are a
// uint64, anything else a string); one that names an id must name the same.

export const SEQUENCE_ID_HEADER = "x-sequence-id";
export const SEQUENCE_ID_METADATA = "sequence-id";

const UINT64_MAX = (1n << 64n) - 1n;

/** The header's value as a sequence id (undefined when absent, empty or 0). */
export function routedSequenceId(value: string | string[] | undefined): SequenceId | undefined {
  const text = Array.isArray(value) ? value[0] : value;
  if (text === undefined || text === "") return undefined;
  if (!/^\d+$/.test(text)) return text;
  const id = BigInt(text);
  if (id > UINT64_MAX) throw invalidArg(`the sequence id '${text}' in X-Sequence-Id is not a uint64`);
  return id === 0n ? undefined : id;
}

/**
 * The sequence id a request goes by: the one it names, else the routed one (for a model
 * served with sequences; others ignore the header). Refused when the two differ.
 */
export function routedRequestId(
  named: SequenceId | undefined,
  routed: SequenceId | undefined,
  model: ServedModel,
): SequenceId | undefined {
  if (routed === undefined || model.sequences === undefined) return named;
  if (named === undefined) return routed;
  if (formatSequenceId(named) !== formatSequenceId(routed)) {
    throw invalidArg(
      `the request names sequence ${formatSequenceId(named)}, but its X-Sequence-Id header (or sequence-id metadata), by which a load balancer routes it, names ${formatSequenceId(routed)}`,
    );
  }
  return named;
}

/** `request` with the routed id, for a model served with sequences; others are left as they are. */
export function withRoutedSequenceId(
  request: InferRequest,
  routed: SequenceId | undefined,
  model: ServedModel,
): InferRequest {
  const control = request.sequence;
  const id = routedRequestId(control?.id, routed, model);
  if (id === control?.id) return request;
  return {
    ...request,
    sequence: { start: false, end: false, timeoutUs: undefined, ...control, id },
  };
}
