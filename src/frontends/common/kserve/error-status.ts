import { status as grpcStatus } from "@grpc/grpc-js";
import type { ErrorCode } from "../../../core/errors.ts";
import type { GrpcStatusTable } from "../../grpc/error-status.ts";
import type { HttpStatusTable } from "../http/error-reply.ts";

// The one error table of the KServe v2 family, over HTTP (frontends/http) and gRPC
// (frontends/grpc): each seqserve error code has its HTTP status and its gRPC code here,
// and so do the few answers KServe's HTTP API gives outside an error code. Handlers never
// pick a status themselves.

interface KserveStatus {
  readonly http: number;
  readonly grpc: grpcStatus;
}

/**
 * Triton's tables (HttpCodeFromError, GrpcStatusUtil), plus the codes Triton does not
 * produce. FAILED_PRECONDITION is 400 over HTTP, as in Google's canonical code mapping:
 * the request cannot be served in the current state and must not be retried unchanged.
 * 412 would suggest a failed conditional header (If-Match…), which KServe clients never send.
 * DEADLINE_EXCEEDED, an outcome that may have happened (Triton has no such code), is
 * 504 Gateway Timeout and gRPC's DEADLINE_EXCEEDED, as in that mapping: neither is
 * retried by gRPC retry policies or HTTP clients by default, where UNAVAILABLE (503, with
 * Retry-After or grpc-retry-pushback-ms) invites a retry that could apply a step twice.
 * A step refused for the server's state budget (--max-state-bytes) keeps RESOURCE_EXHAUSTED
 * (429), with Retry-After and grpc-retry-pushback-ms: Triton has no such budget, so no
 * status of its own to match, and 429 is HTTP's "too much now, retry later".
 */
const KSERVE_STATUS: Readonly<Record<ErrorCode, KserveStatus>> = {
  INVALID_ARG: { http: 400, grpc: grpcStatus.INVALID_ARGUMENT },
  NOT_FOUND: { http: 404, grpc: grpcStatus.NOT_FOUND },
  ALREADY_EXISTS: { http: 400, grpc: grpcStatus.ALREADY_EXISTS },
  FAILED_PRECONDITION: { http: 400, grpc: grpcStatus.FAILED_PRECONDITION },
  UNAVAILABLE: { http: 503, grpc: grpcStatus.UNAVAILABLE },
  DEADLINE_EXCEEDED: { http: 504, grpc: grpcStatus.DEADLINE_EXCEEDED },
  UNSUPPORTED: { http: 501, grpc: grpcStatus.UNIMPLEMENTED },
  INTERNAL: { http: 500, grpc: grpcStatus.INTERNAL },
  CANCELLED: { http: 400, grpc: grpcStatus.CANCELLED },
  RESOURCE_EXHAUSTED: { http: 429, grpc: grpcStatus.RESOURCE_EXHAUSTED },
  UNAUTHENTICATED: { http: 401, grpc: grpcStatus.UNAUTHENTICATED },
  PERMISSION_DENIED: { http: 403, grpc: grpcStatus.PERMISSION_DENIED },
  UNKNOWN: { http: 400, grpc: grpcStatus.UNKNOWN },
};

const table = <T>(pick: (s: KserveStatus) => T): Readonly<Record<ErrorCode, T>> =>
  Object.fromEntries(Object.entries(KSERVE_STATUS).map(([code, s]) => [code, pick(s)])) as Record<
    ErrorCode,
    T
  >;

export const KSERVE_HTTP_STATUS: HttpStatusTable = table((s) => s.http);
export const KSERVE_GRPC_STATUS: GrpcStatusTable = table((s) => s.grpc);

/**
 * KServe's HTTP answers that no error code gives, because over gRPC they are no error.
 * - notReady: a health or readiness check (server live, server ready, model ready) whose
 *   answer is no. Triton answers 400 with no error of its own; over gRPC the answer is
 *   `ready: false` (or `live: false`) with OK.
 * - streamRequired: a plain GET of a WebSocket endpoint (426 Upgrade Required, with
 *   `Upgrade: websocket`); gRPC has no such endpoint.
 */
export const KSERVE_HTTP_ANSWERS = {
  notReady: 400,
  streamRequired: 426,
} as const;
