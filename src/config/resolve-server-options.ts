import { LOG_LEVELS } from "../observability/logger.ts";
import type { BackendSettings } from "./backend-config.ts";
import type { MetricsSettings } from "./metrics-config.ts";
import {
  type AccessOptions,
  DEFAULT_LIMITS,
  type LimitOptions,
  OPEN_ACCESS,
  type SecurityOptions,
  securityOptions,
} from "./security-options.ts";
import { DEFAULT_SERVER_OPTIONS, MAX_SESSION_TTL_SECS, type ServerOptions } from "./server-options.ts";
import type { TraceSettings } from "./trace-config.ts";

// The options of an embedding program (`startServer({...})` from the package): any subset
// of ServerOptions over the defaults, checked as the command line checks its flags, then
// frozen. A wrong value throws a TypeError naming the option. Options that are objects
// (metrics, tracing, security and its limits and access) may be given in part: what is
// left out keeps its default.

/** ServerOptions, each optional (objects in part): what is left out takes the command line's default. */
export type ServerOptionsInput = Partial<
  Omit<ServerOptions, "metrics" | "tracing" | "backendSettings" | "security">
> & {
  readonly metrics?: Partial<MetricsSettings>;
  readonly tracing?: Partial<TraceSettings>;
  readonly backendSettings?: Partial<BackendSettings>;
  readonly security?: SecurityOptionsInput;
};

/** SecurityOptions in part, its limits and access too. */
type SecurityOptionsInput = Partial<Omit<SecurityOptions, "limits" | "access">> & {
  readonly limits?: Partial<LimitOptions>;
  readonly access?: Partial<AccessOptions>;
};

type Check = (value: unknown) => boolean;

const whole =
  (min: number, max = Number.MAX_SAFE_INTEGER): Check =>
  (value) =>
    Number.isInteger(value) && (value as number) >= min && (value as number) <= max;
const port: Check = (value) => value === undefined || whole(0, 65535)(value);
const oneOf =
  (...allowed: readonly unknown[]): Check =>
  (value) =>
    allowed.includes(value);
const text: Check = (value) => typeof value === "string" && value !== "";
const optionalText: Check = (value) => value === undefined || text(value);
const texts: Check = (value) => Array.isArray(value) && value.every(text);
const flag: Check = (value) => typeof value === "boolean";
const object: Check = (value) => typeof value === "object" && value !== null && !Array.isArray(value);

/** What each checked option must be, as the message says it. */
const CHECKS: { readonly [K in keyof ServerOptions]?: readonly [Check, string] } = {
  modelRepositories: [texts, "an array of directories"],
  ovmsConfigs: [texts, "an array of config.json paths"],
  host: [text, "an address"],
  httpPort: [port, "a port from 0 to 65535, or undefined (off)"],
  grpcPort: [port, "a port from 0 to 65535, or undefined (off)"],
  metricsPort: [port, "a port from 0 to 65535, or undefined (off)"],
  sagemakerPort: [port, "a port from 0 to 65535, or undefined (off)"],
  logLevel: [oneOf(...LOG_LEVELS), LOG_LEVELS.join(", ")],
  logFormat: [oneOf("json", "text", "ISO8601"), "json, text or ISO8601"],
  strictModelConfig: [flag, "a boolean"],
  modelControlMode: [oneOf("none", "explicit", "poll"), "none, explicit or poll"],
  loadModels: [texts, "an array of model names"],
  repositoryPollSecs: [whole(0), "a whole number of seconds (0: poll mode loads once)"],
  exitTimeoutSecs: [whole(0), "a whole number of seconds"],
  httpBodyLimitBytes: [whole(1), "a whole number of bytes, at least 1"],
  grpcMaxMessageBytes: [whole(1, 2 ** 31 - 1), "a whole number of bytes from 1 to 2147483647"],
  grpcKeepaliveTimeMs: [whole(1), "a whole number of ms, at least 1"],
  grpcKeepaliveTimeoutMs: [whole(1), "a whole number of ms, at least 1"],
  grpcMaxInflightPerStream: [whole(1), "a whole number, at least 1"],
  httpStreamMaxInflight: [whole(1), "a whole number, at least 1"],
  modelLoadThreadCount: [whole(1), "a whole number, at least 1"],
  onnxWorkerThreads: [whole(0), "a whole number (0: a thread per instance)"],
  sagemakerSessionTtlSecs: [
    whole(1, MAX_SESSION_TTL_SECS),
    `a whole number of seconds from 1 to ${MAX_SESSION_TTL_SECS} (100 years)`,
  ],
  serverId: [text, "a name"],
  httpAddress: [optionalText, "an address, or undefined"],
  grpcAddress: [optionalText, "an address, or undefined"],
  metricsAddress: [optionalText, "an address, or undefined"],
  metricsOnHttpPort: [flag, "a boolean"],
  exitOnError: [flag, "a boolean"],
  strictReadiness: [flag, "a boolean"],
  allowClientSharedMemory: [flag, "a boolean"],
  logFile: [optionalText, "a file, or undefined"],
  modelLoadRetryCount: [whole(0), "a whole number"],
  modelConfigName: [optionalText, "a name, or undefined"],
  grpcMaxConnectionAgeMs: [whole(0), "a whole number of ms (0: never)"],
  grpcMaxConnectionAgeGraceMs: [whole(0), "a whole number of ms"],
  grpcKeepalivePermitWithoutCalls: [flag, "a boolean"],
  sagemakerModel: [optionalText, "a model name, or undefined"],
  sagemakerInferenceType: [
    oneOf("infer", "generate", "generate_stream"),
    "infer, generate or generate_stream",
  ],
  sagemakerPingMode: [oneOf("ready", "live"), "ready or live"],
  stateStore: [optionalText, `"memory" or a Redis location`],
  metrics: [object, "an object of metrics settings"],
  tracing: [object, "an object of trace settings"],
  backendSettings: [object, "an object of backend settings"],
  security: [(value) => value === undefined || object(value), "an object of security options, or undefined"],
};

/** `given` in part over the defaults, its limits and access too. */
function partialSecurity(given: SecurityOptionsInput | undefined): SecurityOptions {
  const options = securityOptions({
    ...given,
    access: { ...OPEN_ACCESS, ...given?.access },
  });
  for (const name of Object.keys(DEFAULT_LIMITS) as (keyof typeof DEFAULT_LIMITS)[]) {
    if (!whole(0)(options.limits[name])) {
      throw new TypeError(
        `seqserve option 'security.limits.${name}' must be a whole number, got ${JSON.stringify(options.limits[name])}`,
      );
    }
  }
  for (const name of Object.keys(options.limits)) {
    if (!(name in DEFAULT_LIMITS))
      throw new TypeError(`seqserve option 'security.limits.${name}' is not a limit`);
  }
  return options;
}

export function resolveServerOptions(input: ServerOptionsInput): ServerOptions {
  // Checked before the objects are merged: a string in place of one is refused, not spread.
  const merged = { ...DEFAULT_SERVER_OPTIONS, ...input } as ServerOptions;
  for (const [name, [check, expected]] of Object.entries(CHECKS) as [
    keyof ServerOptions,
    [Check, string],
  ][]) {
    if (!check(merged[name])) {
      throw new TypeError(
        `seqserve option '${name}' must be ${expected}, got ${JSON.stringify(merged[name])}`,
      );
    }
  }
  const options: ServerOptions = {
    ...merged,
    metrics: { ...DEFAULT_SERVER_OPTIONS.metrics, ...input.metrics },
    tracing: { ...DEFAULT_SERVER_OPTIONS.tracing, ...input.tracing },
    backendSettings: { ...DEFAULT_SERVER_OPTIONS.backendSettings, ...input.backendSettings },
    security: partialSecurity(input.security),
  };
  if (
    options.modelRepositories.length === 0 &&
    options.ovmsConfigs.length === 0 &&
    options.singleModel === undefined
  ) {
    throw new TypeError(
      "seqserve options: no models to serve: give modelRepositories (or ovmsConfigs, or singleModel)",
    );
  }
  return Object.freeze(options);
}
