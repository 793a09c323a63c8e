// Counts of requests, connections and loads refused by a limit or by access control, for
// the metrics endpoint (seqserve_limit_refusals_total, seqserve_auth_refusals_total). One
// instance per server, handed to whatever enforces a limit; counting is a Map increment.

/** Every limit that can refuse something, as the metric's `limit` label names it. */
export const LIMITS = [
  /** A model version asked for more instances than --max-instances-per-model. */
  "instances_per_model",
  /** A string sequence id longer than --max-sequence-id-bytes. */
  "sequence_id_bytes",
  /** A stream ended: its client left more than --max-buffered-response-bytes unread. */
  "buffered_response_bytes",
  /** A stream ended: clients together left more than --max-buffered-response-bytes-total unread, its own among them. */
  "buffered_response_bytes_total",
  /** A gRPC message inflated past --grpc-max-decompressed-bytes. */
  "grpc_decompressed_bytes",
  /** A gRPC call ended: messages received in part would have held more than --grpc-max-partial-message-bytes-total, its connection the most. */
  "grpc_partial_message_bytes",
  /** An HTTP body larger than --http-max-body-bytes (after decompression). */
  "http_body_bytes",
  /** An HTTP request head larger than --http-max-header-bytes. */
  "http_header_bytes",
  /** An HTTP request not received within --http-request-timeout-secs (or its headers within --http-header-timeout-secs). */
  "http_request_timeout",
  /** A WebSocket stream idle past --http-stream-idle-timeout-secs. */
  "http_stream_idle_timeout",
  /** A connection over --http-max-connections. */
  "http_connections",
  /** A connection over --grpc-max-connections. */
  "grpc_connections",
  /** A gRPC connection that did not finish TLS and the HTTP/2 preface within --grpc-handshake-timeout-secs. */
  "grpc_handshake_timeout",
  /** A ModelStreamInfer stream reset: its client read none of its answers for --grpc-stream-stall-timeout-secs. */
  "grpc_stream_stall_timeout",
  /** A browser request from an origin --cors-allow-origin does not list. */
  "cross_origin",
  /** A shared memory region registered past --max-shared-memory-regions. */
  "shared_memory_regions",
  /** A request whose shared memory reads would take those in flight past --max-shared-memory-bytes. */
  "shared_memory_bytes",
  /** A sequence step whose state would take every sequence's state past --max-state-bytes. */
  "state_bytes",
  /** A request whose inputs would take those of every request waiting to run past --max-queued-start-bytes. */
  "queued_start_bytes",
] as const;

export type LimitName = (typeof LIMITS)[number];

/** Why access was refused: no credential, one the server does not know, or one without the right. */
export type AuthRefusal = "missing" | "invalid" | "forbidden";

export class Refusals {
  readonly #limits = new Map<LimitName, number>();
  readonly #auth = new Map<string, number>();

  refused(limit: LimitName): void {
    this.#limits.set(limit, (this.#limits.get(limit) ?? 0) + 1);
  }

  /** An API call refused by access control; `api` is its API group. */
  denied(api: string, why: AuthRefusal): void {
    const key = `${api}\u0000${why}`;
    this.#auth.set(key, (this.#auth.get(key) ?? 0) + 1);
  }

  count(limit: LimitName): number {
    return this.#limits.get(limit) ?? 0;
  }

  /** Refusals by API group and reason. */
  authCounts(): { api: string; reason: AuthRefusal; count: number }[] {
    return [...this.#auth].map(([key, count]) => {
      const [api = "", reason] = key.split("\u0000");
      return { api, reason: reason as AuthRefusal, count };
    });
  }
}
