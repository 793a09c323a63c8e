import type { HttpStatusTable } from "../common/http/error-reply.ts";

// The one place where seqserve's error codes become KServe v2 HTTP statuses. Other
// protocol families served over HTTP (TF-Serving REST, SageMaker) get their own table
// beside this one; handlers never choose a status themselves.

/**
 * Triton's table (HttpCodeFromError), plus the codes Triton does not produce.
 * FAILED_PRECONDITION is 400, as in Google's canonical code mapping: the request cannot
 * be served in the current state and must not be retried unchanged. 412 would suggest a
 * failed conditional header (If-Match…), which KServe clients never send.
 */
export const KSERVE_HTTP_STATUS: HttpStatusTable = {
  INVALID_ARG: 400,
  ALREADY_EXISTS: 400,
  CANCELLED: 400,
  UNKNOWN: 400,
  FAILED_PRECONDITION: 400,
  NOT_FOUND: 404,
  RESOURCE_EXHAUSTED: 429,
  UNAUTHENTICATED: 401,
  PERMISSION_DENIED: 403,
  INTERNAL: 500,
  UNSUPPORTED: 501,
  UNAVAILABLE: 503,
};
