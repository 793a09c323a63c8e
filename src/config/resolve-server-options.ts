import { LOG_LEVELS } from "../observability/logger.ts";
import { DEFAULT_SERVER_OPTIONS, MAX_SESSION_TTL_SECS, type ServerOptions } from "./server-options.ts";

// The options of an embedding program (`startServer({...})` from the package): any subset
// of ServerOptions over the defaults, checked as the command line checks its flags, then
// frozen. A wrong value throws a TypeError naming the option.

/** ServerOptions, each optional: what is left out takes the command line's default. */
export type ServerOptionsInput = Partial<ServerOptions>;

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
};

export function resolveServerOptions(input: ServerOptionsInput): ServerOptions {
  const options: ServerOptions = { ...DEFAULT_SERVER_OPTIONS, ...input };
  for (const [name, [check, expected]] of Object.entries(CHECKS) as [
    keyof ServerOptions,
    [Check, string],
  ][]) {
    if (!check(options[name])) {
      throw new TypeError(
        `seqserve option '${name}' must be ${expected}, got ${JSON.stringify(options[name])}`,
      );
    }
  }
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
