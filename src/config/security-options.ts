// What makes the server safe to expose: limits on everything a client can make it hold
// (in bytes and in time), who may call which API, TLS, and which web origins may call it
// from a browser. Validated once by the CLI (or the embedding program) and frozen.
import { totalmem } from "node:os";

/**
 * The API groups access is granted by: Triton's restricted-API categories (the spelling
 * of --http-restricted-api and --grpc-restricted-protocol), plus seqserve's sequences API
 * and metrics endpoint.
 */
export const API_GROUPS = [
  "health",
  "metadata",
  "inference",
  "shared-memory",
  "model-config",
  "model-repository",
  "statistics",
  "trace",
  "logging",
  "sequences",
  "metrics",
] as const;

export type ApiGroup = (typeof API_GROUPS)[number];

export function isApiGroup(value: string): value is ApiGroup {
  return (API_GROUPS as readonly string[]).includes(value);
}

/** An API key (bearer token): who holds it (its name) and which API groups it opens. */
export interface ApiKey {
  /** Names the caller in logs and owns the sequences it starts; never the secret itself. */
  readonly name: string;
  readonly secret: string;
  readonly groups: readonly ApiGroup[];
}

/** Triton's restriction: a group answers only requests carrying `header: value`. */
export interface HeaderRestriction {
  /** Lower case, as HTTP and gRPC metadata present names. */
  readonly header: string;
  readonly value: string;
}

export interface AccessOptions {
  /** API keys; when there is any, every group not in `openGroups` needs a key that opens it. */
  readonly apiKeys: readonly ApiKey[];
  /** Groups open without a key even when keys are configured. */
  readonly openGroups: readonly ApiGroup[];
  /** --http-restricted-api: per group, the header HTTP requests must carry. */
  readonly httpRestrictions: Readonly<Partial<Record<ApiGroup, HeaderRestriction>>>;
  /** --grpc-restricted-protocol: per group, the metadata gRPC calls must carry. */
  readonly grpcRestrictions: Readonly<Partial<Record<ApiGroup, HeaderRestriction>>>;
}

/** PEM contents, read at start. */
export interface TlsOptions {
  readonly cert: Buffer;
  readonly key: Buffer;
  /** CA certificates client certificates are checked against (mutual TLS). */
  readonly rootCert: Buffer | undefined;
  /** Require and verify a client certificate. */
  readonly mutual: boolean;
}

export interface LimitOptions {
  /** Instances (worker threads) one model version may ask for, in its config or a load request. */
  readonly maxInstancesPerModel: number;
  /** Longest string sequence id, in UTF-8 bytes. */
  readonly maxSequenceIdBytes: number;
  /** Answers a connection's streams (gRPC, WebSocket, SSE) may have waiting to be sent. */
  readonly maxBufferedResponseBytes: number;
  /** Answers every connection together may have waiting to be sent. */
  readonly maxBufferedResponseBytesTotal: number;
  /** What one gzip / deflate gRPC message may inflate to. */
  readonly grpcMaxDecompressedBytes: number;
  /** What gRPC messages received in part (not yet whole) hold, every connection together. */
  readonly grpcMaxPartialMessageBytesTotal: number;
  /** Largest HTTP request head (request line and headers). */
  readonly httpMaxHeaderBytes: number;
  /** Time to receive a request's headers. */
  readonly httpHeaderTimeoutSecs: number;
  /** Time to receive a whole request, body included. */
  readonly httpRequestTimeoutSecs: number;
  /** How long an idle keep-alive connection stays open. */
  readonly httpKeepAliveTimeoutSecs: number;
  /** A WebSocket stream with no message and nothing in flight this long is closed. */
  readonly httpStreamIdleTimeoutSecs: number;
  /** Open connections per HTTP port (HTTP, SageMaker, metrics). */
  readonly httpMaxConnections: number;
  readonly grpcMaxConnections: number;
  /** Time a gRPC connection has to complete TLS and send the HTTP/2 preface. */
  readonly grpcHandshakeTimeoutSecs: number;
  /** Calls at once on one gRPC connection (HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS). */
  readonly grpcMaxConcurrentStreams: number;
  /** A ModelStreamInfer stream whose client takes no answer this long is reset. */
  readonly grpcStreamStallTimeoutSecs: number;
  /** Request bytes a stream (ModelStreamInfer, a WebSocket) holds unanswered before it stops reading. */
  readonly maxHeldRequestBytes: number;
  /** Input bytes of the requests every model has queued and not yet running, together. */
  readonly maxQueuedStartBytes: number;
  /** System shared memory regions registered at once (with --allow-client-shm). */
  readonly maxSharedMemoryRegions: number;
  /** Bytes read from shared memory by requests not yet answered, server-wide. */
  readonly maxSharedMemoryBytes: number;
  /** Bytes every model's sequences may keep as state together. */
  readonly maxStateBytes: number;
}

export interface SecurityOptions {
  readonly limits: LimitOptions;
  readonly access: AccessOptions;
  /** HTTPS on every HTTP port; undefined = plain HTTP. */
  readonly httpTls: TlsOptions | undefined;
  /** TLS on the gRPC port; undefined = plaintext. */
  readonly grpcTls: TlsOptions | undefined;
  /** Web origins allowed to call from a browser (CORS); empty = none, "*" = any. */
  readonly corsAllowOrigins: readonly string[];
}

const MiB = 1024 * 1024;

/**
 * Half the memory the process may use: the machine's, or its container's limit (cgroup)
 * when that is lower. The rest is for the process itself, models, requests in flight and
 * whatever else runs beside it.
 */
function defaultMaxStateBytes(): number {
  // Where no limit is set, Node gives undefined, 0 or 2^64 by version and cgroup setup.
  const limit = process.constrainedMemory?.() ?? 0;
  const memory = limit > 0 && limit < totalmem() ? limit : totalmem();
  return Math.floor(memory / 2);
}

export const DEFAULT_LIMITS: LimitOptions = Object.freeze({
  maxInstancesPerModel: 64,
  maxSequenceIdBytes: 256,
  maxBufferedResponseBytes: 64 * MiB,
  // A quarter of the memory the process may use (sequence state may take half).
  maxBufferedResponseBytesTotal: Math.floor(defaultMaxStateBytes() / 2),
  grpcMaxDecompressedBytes: 64 * MiB,
  // An eighth of the memory the process may use: with the state's half, the answers'
  // quarter and the queued STARTs' eighth, the bounds a client can fill add up to it.
  grpcMaxPartialMessageBytesTotal: Math.floor(defaultMaxStateBytes() / 4),
  httpMaxHeaderBytes: 16 * 1024,
  httpHeaderTimeoutSecs: 30,
  httpRequestTimeoutSecs: 120,
  httpKeepAliveTimeoutSecs: 5,
  httpStreamIdleTimeoutSecs: 600,
  httpMaxConnections: 4096,
  grpcMaxConnections: 4096,
  grpcHandshakeTimeoutSecs: 10,
  grpcMaxConcurrentStreams: 1024,
  grpcStreamStallTimeoutSecs: 600,
  maxHeldRequestBytes: 64 * MiB,
  // An eighth of the memory the process may use (see grpcMaxPartialMessageBytesTotal).
  maxQueuedStartBytes: Math.floor(defaultMaxStateBytes() / 4),
  maxSharedMemoryRegions: 1024,
  maxSharedMemoryBytes: 256 * MiB,
  maxStateBytes: defaultMaxStateBytes(),
});

export const OPEN_ACCESS: AccessOptions = Object.freeze<AccessOptions>({
  apiKeys: [],
  openGroups: ["health"],
  httpRestrictions: {},
  grpcRestrictions: {},
});

export const DEFAULT_SECURITY_OPTIONS: SecurityOptions = Object.freeze({
  limits: DEFAULT_LIMITS,
  access: OPEN_ACCESS,
  httpTls: undefined,
  grpcTls: undefined,
  corsAllowOrigins: [],
});

/** The options with every limit not given at its default. */
export function securityOptions(
  given: Partial<Omit<SecurityOptions, "limits">> & { readonly limits?: Partial<LimitOptions> } = {},
): SecurityOptions {
  return {
    ...DEFAULT_SECURITY_OPTIONS,
    ...given,
    limits: { ...DEFAULT_LIMITS, ...given.limits },
  };
}
