// seqserve as a library: start the server from a program, with the command line's options
// (each optional), typed. The command itself is bin/seqserve.js.
//
//   import { startServer } from "seqserve";
//   const server = await startServer({ modelRepositories: ["./models"], httpPort: 8000 });
//   ...
//   await server.stop();

export { type RunningServer, SEQSERVE_VERSION, type StartOptions, startServer } from "./app/server.ts";
export { type CliCommand, parseCommandLine, UsageError } from "./cli/options.ts";
export type { BackendSettings } from "./config/backend-config.ts";
export type { MetricsSettings, SummaryQuantile } from "./config/metrics-config.ts";
export type { ServerOptionsInput } from "./config/resolve-server-options.ts";
export type {
  AccessOptions,
  ApiGroup,
  ApiKey,
  LimitOptions,
  SecurityOptions,
  TlsOptions,
} from "./config/security-options.ts";
export type { ModelControlMode, ServerOptions } from "./config/server-options.ts";
export type { TraceMode, TraceSettings } from "./config/trace-config.ts";
export { type ErrorCode, ServerError } from "./core/errors.ts";
// The types TypeScript model handlers are written against.
export type * from "./handler-api.ts";
export type { LogFormat, Logger, LogLevel } from "./observability/logger.ts";
