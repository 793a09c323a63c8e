import { readFileSync } from "node:fs";
import {
  type AccessOptions,
  API_GROUPS,
  type ApiGroup,
  type ApiKey,
  DEFAULT_LIMITS,
  type HeaderRestriction,
  isApiGroup,
  type LimitOptions,
  type SecurityOptions,
  type TlsOptions,
} from "../config/security-options.ts";
import { flagBoolean } from "./flag-boolean.ts";
import type { FlagSpec } from "./options.ts";
import { UsageError } from "./usage-error.ts";

// The flags that make seqserve safe to expose: a limit for everything a client can make
// the server hold, API keys and Triton's restricted APIs, TLS (Triton's --grpc-use-ssl*
// spellings, and the same in --http-* form), and CORS. Secrets (keys, private keys) are
// read from files or the environment, never taken on the command line, where any user
// of the machine can read them.

const limit = (name: string, value: string, key: keyof LimitOptions, help: string): FlagSpec => ({
  name,
  value,
  default: String(DEFAULT_LIMITS[key]),
  help,
});

/**
 * A limit whose default is a share of the memory the process may use, which its help
 * says: the figure that share comes to on this machine is not printed as its default.
 */
const memoryShareLimit = (name: string, value: string, help: string): FlagSpec => ({ name, value, help });

const LIMIT_FLAGS: readonly [FlagSpec, keyof LimitOptions, number][] = [
  [
    limit(
      "max-instances-per-model",
      "n",
      "maxInstancesPerModel",
      "Instances (worker threads) a model version may have, from its config or a load request; more is refused.",
    ),
    "maxInstancesPerModel",
    1,
  ],
  [
    limit(
      "max-sequence-id-bytes",
      "bytes",
      "maxSequenceIdBytes",
      "Longest string sequence id (UTF-8 bytes); longer ids are refused.",
    ),
    "maxSequenceIdBytes",
    1,
  ],
  [
    limit(
      "max-buffered-response-bytes",
      "bytes",
      "maxBufferedResponseBytes",
      "Answers a connection may have waiting for a client that does not read (gRPC ModelStreamInfer, ModelInfer and Predict, WebSocket, SSE): at half of it streams stop reading requests and new ModelInfer calls are refused; past it the stream is ended.",
    ),
    "maxBufferedResponseBytes",
    1024,
  ],
  [
    memoryShareLimit(
      "max-buffered-response-bytes-total",
      "bytes",
      "Answers all connections together may have waiting for clients that do not read (default: a quarter of the memory the process may use): past half of it, connections holding answers stop reading requests; an answer that would take the total past it ends its stream, unless its connection holds none.",
    ),
    "maxBufferedResponseBytesTotal",
    1024,
  ],
  [
    limit(
      "grpc-max-decompressed-bytes",
      "bytes",
      "grpcMaxDecompressedBytes",
      "Largest size a gzip or deflate gRPC message may inflate to, and what a request's typed values (contents, *_val) may take once decoded, checked before decoding.",
    ),
    "grpcMaxDecompressedBytes",
    1,
  ],
  [
    memoryShareLimit(
      "grpc-max-partial-message-bytes-total",
      "bytes",
      "What gRPC messages received in part (sent more slowly than read, or never finished) may hold, all connections together (default: an eighth of the memory the process may use); a message that would pass it ends a call of the connection holding the most, which may be its own (RESOURCE_EXHAUSTED).",
    ),
    "grpcMaxPartialMessageBytesTotal",
    1024,
  ],
  [
    limit(
      "http-max-header-bytes",
      "bytes",
      "httpMaxHeaderBytes",
      "Largest HTTP request head (request line and headers); larger gets 431.",
    ),
    "httpMaxHeaderBytes",
    1024,
  ],
  [
    limit(
      "http-header-timeout-secs",
      "seconds",
      "httpHeaderTimeoutSecs",
      "Time a client has to send a request's headers.",
    ),
    "httpHeaderTimeoutSecs",
    1,
  ],
  [
    limit(
      "http-request-timeout-secs",
      "seconds",
      "httpRequestTimeoutSecs",
      "Time a client has to send a whole request, body included; then 408.",
    ),
    "httpRequestTimeoutSecs",
    1,
  ],
  [
    limit(
      "http-keepalive-timeout-secs",
      "seconds",
      "httpKeepAliveTimeoutSecs",
      "How long an idle keep-alive HTTP connection stays open.",
    ),
    "httpKeepAliveTimeoutSecs",
    1,
  ],
  [
    limit(
      "http-stream-idle-timeout-secs",
      "seconds",
      "httpStreamIdleTimeoutSecs",
      "A WebSocket stream that sends no message and has nothing in flight (or reads none of its answers) this long is closed (1001); an SSE response whose client takes nothing, its connection.",
    ),
    "httpStreamIdleTimeoutSecs",
    1,
  ],
  [
    limit(
      "http-max-connections",
      "n",
      "httpMaxConnections",
      "Open connections per HTTP port (HTTP, SageMaker, metrics); more are closed at once.",
    ),
    "httpMaxConnections",
    1,
  ],
  [
    limit(
      "grpc-max-connections",
      "n",
      "grpcMaxConnections",
      "Open gRPC connections; more are closed at once.",
    ),
    "grpcMaxConnections",
    1,
  ],
  [
    limit(
      "grpc-handshake-timeout-secs",
      "seconds",
      "grpcHandshakeTimeoutSecs",
      "Time a gRPC connection has to finish TLS and send the HTTP/2 preface; then it is closed.",
    ),
    "grpcHandshakeTimeoutSecs",
    1,
  ],
  [
    limit(
      "grpc-max-concurrent-streams",
      "n",
      "grpcMaxConcurrentStreams",
      "Calls at once on one gRPC connection.",
    ),
    "grpcMaxConcurrentStreams",
    1,
  ],
  [
    limit(
      "grpc-stream-stall-timeout-secs",
      "seconds",
      "grpcStreamStallTimeoutSecs",
      "A ModelStreamInfer stream whose client takes none of its answers this long is reset; its requests not yet run are cancelled.",
    ),
    "grpcStreamStallTimeoutSecs",
    1,
  ],
  [
    limit(
      "max-held-request-bytes",
      "bytes",
      "maxHeldRequestBytes",
      "Request bytes a stream (gRPC ModelStreamInfer, a WebSocket) may hold received and not yet answered; past it the stream reads no more until answers go out. A gRPC stream leaves out requests waiting for a sequence slot (bounded by --max-queued-start-bytes) and answered ones waiting for their turn.",
    ),
    "maxHeldRequestBytes",
    1,
  ],
  [
    memoryShareLimit(
      "max-queued-start-bytes",
      "bytes",
      "Bytes held by the STARTs every model has queued and not yet running, and by the steps sent behind them, together, each its inputs plus 6400 for the request itself (a sequence backlog waiting for slots, which Triton leaves unbounded; default: an eighth of the memory the process may use); a START or step that would pass it is refused at once (503 with Retry-After, UNAVAILABLE).",
    ),
    "maxQueuedStartBytes",
    1,
  ],
  [
    limit(
      "max-shared-memory-regions",
      "n",
      "maxSharedMemoryRegions",
      "System shared memory regions registered at once (with --allow-client-shm=true); more are refused.",
    ),
    "maxSharedMemoryRegions",
    1,
  ],
  [
    limit(
      "max-shared-memory-bytes",
      "bytes",
      "maxSharedMemoryBytes",
      "Bytes read from shared memory by requests not yet answered, server-wide; a request that would pass it is refused.",
    ),
    "maxSharedMemoryBytes",
    1,
  ],
  [
    memoryShareLimit(
      "max-state-bytes",
      "bytes",
      "Bytes every model's sequences may keep as state together (default: half the memory the process may use, the machine's or its container's limit); a step whose state would pass it fails, and its state stays as it was.",
    ),
    "maxStateBytes",
    1,
  ],
];

const tlsFlags = (prefix: "http" | "grpc", triton: boolean): FlagSpec[] => [
  {
    name: `${prefix}-use-ssl`,
    boolean: true,
    default: "false",
    help: `Serve ${prefix === "http" ? "every HTTP port (HTTP, SageMaker, metrics) over HTTPS" : "gRPC over TLS"}.${triton ? " Triton's flag." : ""}`,
  },
  {
    name: `${prefix}-use-ssl-mutual`,
    boolean: true,
    default: "false",
    help: `Also require a client certificate signed by --${prefix}-root-cert (implies --${prefix}-use-ssl).`,
  },
  { name: `${prefix}-server-cert`, value: "file", help: "PEM server certificate (chain)." },
  { name: `${prefix}-server-key`, value: "file", help: "PEM private key of the server certificate." },
  {
    name: `${prefix}-root-cert`,
    value: "file",
    help: "PEM CA certificates client certificates are verified against.",
  },
];

export const SECURITY_FLAGS: readonly FlagSpec[] = [
  ...LIMIT_FLAGS.map(([flag]) => flag),
  {
    name: "api-keys-file",
    value: "file",
    multiple: true,
    help: "API keys, one per line: '<name> <api>[,<api>…] <key>' ('*' = every API). With any key, every API but --api-keys-open-apis needs one (Authorization: Bearer <key>, or x-api-key). Repeatable.",
  },
  {
    name: "api-keys-env",
    value: "variable",
    multiple: true,
    help: "An environment variable holding API keys in the --api-keys-file format (lines or ';'-separated). Repeatable.",
  },
  {
    name: "api-keys-open-apis",
    value: "api,…",
    default: "health",
    help: `APIs open without a key when keys are configured ('' = none). APIs: ${API_GROUPS.join(", ")}.`,
  },
  {
    name: "http-restricted-api",
    value: "apis:key=value",
    multiple: true,
    help: "Triton's restricted HTTP API: the listed APIs answer only requests with header <key>: <value> (else 403). Repeatable.",
  },
  {
    name: "grpc-restricted-protocol",
    value: "protocols:key=value",
    multiple: true,
    help: "Triton's restricted gRPC protocols: the listed APIs answer only calls with metadata triton-grpc-protocol-<key>: <value>. Repeatable.",
  },
  ...tlsFlags("grpc", true),
  ...tlsFlags("http", false),
  {
    name: "cors-allow-origin",
    value: "origin",
    multiple: true,
    help: "A web origin (https://app.example) allowed to call the HTTP API from a browser; '*' = any. Repeatable. Without it, requests from other origins are refused.",
  },
];

type Values = Readonly<Record<string, string | string[] | undefined>>;
type Env = Readonly<Record<string, string | undefined>>;

const one = (values: Values, name: string): string | undefined => values[name] as string | undefined;
const many = (values: Values, name: string): string[] => (values[name] as string[] | undefined) ?? [];

function wholeNumber(name: string, text: string, min: number): number {
  if (!/^\d+$/.test(text)) throw new UsageError(`--${name} expects a whole number, got '${text}'`);
  const n = Number(text);
  if (!Number.isSafeInteger(n) || n < min)
    throw new UsageError(`--${name} must be at least ${min}, got ${text}`);
  return n;
}

function flag(values: Values, name: string): boolean {
  const text = one(values, name);
  return text !== undefined && flagBoolean(name, text);
}

function readLimits(values: Values): LimitOptions {
  const limits: Record<string, number> = { ...DEFAULT_LIMITS };
  for (const [spec, key, min] of LIMIT_FLAGS) {
    const text = one(values, spec.name);
    if (text !== undefined) limits[key] = wholeNumber(spec.name, text, min);
  }
  return limits as unknown as LimitOptions;
}

function groupList(source: string, text: string): ApiGroup[] {
  if (text === "*") return [...API_GROUPS];
  const groups: ApiGroup[] = [];
  for (const name of text.split(",").map((g) => g.trim())) {
    if (name === "") continue;
    if (!isApiGroup(name)) {
      throw new UsageError(`${source}: unknown API '${name}' (APIs: ${API_GROUPS.join(", ")}, or *)`);
    }
    groups.push(name);
  }
  return groups;
}

const KEY_NAME = /^[A-Za-z0-9._@-]{1,64}$/;
/** Shorter keys can be guessed: refused at start rather than trusted. */
const MIN_KEY_LENGTH = 16;

/** API keys in the '<name> <apis> <key>' line format; `source` names where they came from. */
function parseApiKeys(text: string, source: string): ApiKey[] {
  const keys: ApiKey[] = [];
  const lines = text.split(/\r?\n|;/);
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i]!.trim();
    if (line === "" || line.startsWith("#")) continue;
    const where = `${source}, entry ${i + 1}`;
    const parts = line.split(/\s+/);
    if (parts.length !== 3) {
      throw new UsageError(`${where}: expected '<name> <api>[,<api>…] <key>', got ${parts.length} fields`);
    }
    const [name, apis, secret] = parts as [string, string, string];
    if (!KEY_NAME.test(name)) {
      throw new UsageError(`${where}: the key name may have 1 to 64 letters, digits and . _ @ -`);
    }
    if (secret.length < MIN_KEY_LENGTH) {
      throw new UsageError(`${where}: the key of '${name}' is shorter than ${MIN_KEY_LENGTH} characters`);
    }
    keys.push({ name, secret, groups: groupList(where, apis) });
  }
  return keys;
}

function readApiKeys(values: Values, env: Env): ApiKey[] {
  const keys: ApiKey[] = [];
  for (const file of many(values, "api-keys-file")) {
    let text: string;
    try {
      text = readFileSync(file, "utf8");
    } catch {
      throw new UsageError(`--api-keys-file: cannot read '${file}'`);
    }
    keys.push(...parseApiKeys(text, `API keys file '${file}'`));
  }
  for (const variable of many(values, "api-keys-env")) {
    const text = env[variable];
    if (text === undefined || text.trim() === "") {
      throw new UsageError(`--api-keys-env: the environment variable ${variable} is not set`);
    }
    keys.push(...parseApiKeys(text, `environment variable ${variable}`));
  }
  const secrets = new Set<string>();
  for (const key of keys) {
    // Two names for one secret would make the caller's identity ambiguous.
    if (secrets.has(key.secret)) throw new UsageError(`API key '${key.name}' reuses another entry's key`);
    secrets.add(key.secret);
  }
  return keys;
}

/**
 * Triton's `<apis>:<key>=<value>` restrictions; each API in at most one of them, as
 * Triton's parser requires. `prefix` goes before the header name (gRPC's
 * `triton-grpc-protocol-`).
 */
function parseRestrictions(
  flagName: string,
  entries: readonly string[],
  prefix: string,
): Partial<Record<ApiGroup, HeaderRestriction>> {
  const restrictions: Partial<Record<ApiGroup, HeaderRestriction>> = {};
  for (const entry of entries) {
    const colon = entry.indexOf(":");
    const equals = entry.indexOf("=", colon + 1);
    if (colon <= 0 || equals <= colon + 1) {
      throw new UsageError(`--${flagName} expects <apis>:<key>=<value>, got '${entry}'`);
    }
    const header = `${prefix}${entry.slice(colon + 1, equals)}`.toLowerCase();
    const value = entry.slice(equals + 1);
    for (const name of entry.slice(0, colon).split(",")) {
      if (!isApiGroup(name)) throw new UsageError(`--${flagName}: unknown restricted API '${name}'`);
      if (restrictions[name] !== undefined) {
        throw new UsageError(
          `--${flagName}: restricted API '${name}' can not be specified in multiple config groups`,
        );
      }
      restrictions[name] = { header, value };
    }
  }
  return restrictions;
}

function readAccess(values: Values, env: Env): AccessOptions {
  return {
    apiKeys: readApiKeys(values, env),
    openGroups: groupList("--api-keys-open-apis", one(values, "api-keys-open-apis") ?? "health"),
    httpRestrictions: parseRestrictions("http-restricted-api", many(values, "http-restricted-api"), ""),
    grpcRestrictions: parseRestrictions(
      "grpc-restricted-protocol",
      many(values, "grpc-restricted-protocol"),
      "triton-grpc-protocol-",
    ),
  };
}

function pem(values: Values, name: string): Buffer | undefined {
  const file = one(values, name);
  if (file === undefined) return undefined;
  try {
    return readFileSync(file);
  } catch {
    throw new UsageError(`--${name}: cannot read '${file}'`);
  }
}

function readTls(values: Values, prefix: "http" | "grpc"): TlsOptions | undefined {
  const mutual = flag(values, `${prefix}-use-ssl-mutual`);
  if (!mutual && !flag(values, `${prefix}-use-ssl`)) return undefined;
  const cert = pem(values, `${prefix}-server-cert`);
  const key = pem(values, `${prefix}-server-key`);
  if (cert === undefined || key === undefined) {
    throw new UsageError(`--${prefix}-use-ssl needs --${prefix}-server-cert and --${prefix}-server-key`);
  }
  const rootCert = pem(values, `${prefix}-root-cert`);
  if (mutual && rootCert === undefined) {
    throw new UsageError(
      `--${prefix}-use-ssl-mutual needs --${prefix}-root-cert to verify client certificates`,
    );
  }
  return { cert, key, rootCert, mutual };
}

function readOrigins(values: Values): string[] {
  return many(values, "cors-allow-origin").map((origin) => {
    if (origin === "*") return origin;
    let url: URL;
    try {
      url = new URL(origin);
    } catch {
      throw new UsageError(
        `--cors-allow-origin expects an origin such as https://app.example, got '${origin}'`,
      );
    }
    if (url.origin !== origin.replace(/\/$/, "")) {
      throw new UsageError(`--cors-allow-origin expects an origin (scheme://host[:port]), got '${origin}'`);
    }
    return url.origin;
  });
}

/** The security options from parsed flags (and, for --api-keys-env, the environment). */
export function readSecurityOptions(values: Values, env: Env): SecurityOptions {
  return {
    limits: readLimits(values),
    access: readAccess(values, env),
    httpTls: readTls(values, "http"),
    grpcTls: readTls(values, "grpc"),
    corsAllowOrigins: readOrigins(values),
  };
}
