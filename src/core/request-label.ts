/**
 * How Triton opens the messages of the checks it makes as it normalizes a request, and of
 * its correlation id's type (InferenceRequest::LogRequest): the request's id, or
 * "<id_unknown>" for a request without one.
 */
export function requestLabel(requestId: string): string {
  return `[request id: ${requestId === "" ? "<id_unknown>" : requestId}] `;
}

const LABEL = /^\[request id: [^\]]*\] /;

/** `message` without requestLabel's opening, for families whose requests have no id (TF-Serving). */
export function withoutRequestLabel(message: string): string {
  return message.replace(LABEL, "");
}

/**
 * `message`, written for another request (one that opens with requestLabel), opened with
 * `requestId`'s label: the same refusal told to each request it applies to. A message
 * without the label is kept as it is.
 */
export function relabelled(message: string, requestId: string): string {
  return LABEL.test(message) ? requestLabel(requestId) + withoutRequestLabel(message) : message;
}
