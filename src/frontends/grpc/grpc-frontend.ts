import { type ChannelOptions, Server, ServerCredentials } from "@grpc/grpc-js";
import type { ServerContext } from "../../core/model.ts";
import type { Logger } from "../../observability/logger.ts";
import { tfsGrpcServices } from "../tfs/grpc-services.ts";
import { healthService } from "./health-service.ts";
import { inferenceService } from "./inference-service.ts";
import type { GrpcServiceRegistration } from "./service-registration.ts";

// The gRPC frontend: one grpc-js server carrying inference.GRPCInferenceService,
// grpc.health.v1.Health, and TF-Serving's PredictionService and ModelService.

/** Triton's default message limit (INT32_MAX): tensors are routinely far above grpc-js's 4 MiB. */
export const DEFAULT_MAX_MESSAGE_BYTES = 2 ** 31 - 1;
export const DEFAULT_MAX_INFLIGHT_PER_STREAM = 128;

export interface GrpcKeepaliveOptions {
  /** Interval of the server's keepalive pings on each connection (grpc.keepalive_time_ms). */
  readonly timeMs: number;
  /** How long a ping may go unanswered before the connection is dropped (grpc.keepalive_timeout_ms). */
  readonly timeoutMs: number;
  /**
   * grpc.keepalive_permit_without_calls, as Triton's --grpc-keepalive-permit-without-calls.
   * Passed to grpc-js, whose server does not police client pings, so it accepts pings
   * with or without calls either way.
   */
  readonly permitWithoutCalls: boolean;
  /** Close connections idle this long (grpc.max_connection_idle_ms); undefined = never. */
  readonly maxConnectionIdleMs?: number;
  /** Close connections this old (grpc.max_connection_age_ms); undefined = never. */
  readonly maxConnectionAgeMs?: number;
  /** Grace for calls on a connection closed for its age (grpc.max_connection_age_grace_ms). */
  readonly maxConnectionAgeGraceMs?: number;
}

/** Triton's defaults: a ping every 2 hours, 20 s to answer it. */
export const DEFAULT_KEEPALIVE: GrpcKeepaliveOptions = {
  timeMs: 7_200_000,
  timeoutMs: 20_000,
  permitWithoutCalls: false,
};

/** TLS for the gRPC port, as PEM contents. */
export interface GrpcTls {
  readonly certChain: Buffer;
  readonly privateKey: Buffer;
  /** The CA client certificates must chain to. */
  readonly rootCerts: Buffer | undefined;
  /** Clients must present a certificate (mutual TLS). */
  readonly requireClientCertificate: boolean;
}

export interface GrpcFrontendOptions {
  readonly context: ServerContext;
  readonly logger: Logger;
  /** Largest message received or sent, in bytes (default INT32_MAX, as Triton). */
  readonly maxMessageBytes?: number;
  readonly keepalive?: Partial<GrpcKeepaliveOptions>;
  /** Unanswered requests per ModelStreamInfer stream before the server stops reading it. */
  readonly maxInflightPerStream?: number;
  /** Serve over TLS; undefined: plaintext. */
  readonly tls?: GrpcTls | undefined;
}

export interface GrpcFrontend {
  /** Binds host:port (port 0 = any free port) and resolves with the bound port. */
  listen(host: string, port: number): Promise<number>;
  /**
   * Stops accepting calls, lets calls in flight finish for up to `graceMs`, then cancels
   * the rest (which aborts their requests). Resolves when the server is closed.
   */
  close(graceMs?: number): Promise<void>;
}

function serverOptions(options: GrpcFrontendOptions): ChannelOptions {
  const maxMessageBytes = options.maxMessageBytes ?? DEFAULT_MAX_MESSAGE_BYTES;
  // Field by field: a caller may pass a setting as undefined to mean "the default".
  const given = options.keepalive ?? {};
  const keepalive: GrpcKeepaliveOptions = {
    ...given,
    timeMs: given.timeMs ?? DEFAULT_KEEPALIVE.timeMs,
    timeoutMs: given.timeoutMs ?? DEFAULT_KEEPALIVE.timeoutMs,
    permitWithoutCalls: given.permitWithoutCalls ?? DEFAULT_KEEPALIVE.permitWithoutCalls,
  };
  const channelOptions: ChannelOptions = {
    "grpc.max_receive_message_length": maxMessageBytes,
    "grpc.max_send_message_length": maxMessageBytes,
    "grpc.keepalive_time_ms": keepalive.timeMs,
    "grpc.keepalive_timeout_ms": keepalive.timeoutMs,
    "grpc.keepalive_permit_without_calls": keepalive.permitWithoutCalls ? 1 : 0,
  };
  if (keepalive.maxConnectionIdleMs !== undefined) {
    channelOptions["grpc.max_connection_idle_ms"] = keepalive.maxConnectionIdleMs;
  }
  if (keepalive.maxConnectionAgeMs !== undefined) {
    channelOptions["grpc.max_connection_age_ms"] = keepalive.maxConnectionAgeMs;
  }
  if (keepalive.maxConnectionAgeGraceMs !== undefined) {
    channelOptions["grpc.max_connection_age_grace_ms"] = keepalive.maxConnectionAgeGraceMs;
  }
  return channelOptions;
}

/** "host:port" as grpc-js wants it (IPv6 literals in brackets). */
function bindAddress(host: string, port: number): string {
  return host.includes(":") && !host.startsWith("[") ? `[${host}]:${port}` : `${host}:${port}`;
}

export function createGrpcFrontend(options: GrpcFrontendOptions): GrpcFrontend {
  const { context, logger } = options;
  const server = new Server(serverOptions(options));
  const services: GrpcServiceRegistration[] = [
    inferenceService({
      context,
      logger,
      maxInflightPerStream: options.maxInflightPerStream ?? DEFAULT_MAX_INFLIGHT_PER_STREAM,
      maxMessageBytes: options.maxMessageBytes ?? DEFAULT_MAX_MESSAGE_BYTES,
    }),
    healthService({ context, logger }),
    ...tfsGrpcServices({ context, logger }),
  ];
  for (const service of services) server.addService(service.definition, service.implementation);
  let closing: Promise<void> | undefined;
  const tls = options.tls;
  const credentials =
    tls === undefined
      ? ServerCredentials.createInsecure()
      : ServerCredentials.createSsl(
          tls.rootCerts ?? null,
          [{ cert_chain: tls.certChain, private_key: tls.privateKey }],
          tls.requireClientCertificate,
        );

  return {
    listen(host, port) {
      return new Promise((resolve, reject) => {
        server.bindAsync(bindAddress(host, port), credentials, (error, boundPort) => {
          if (error) {
            reject(error);
            return;
          }
          logger.info({ host, port: boundPort, tls: tls !== undefined }, "gRPC frontend listening");
          resolve(boundPort);
        });
      });
    },
    close(graceMs = 0) {
      closing ??= new Promise<void>((resolve) => {
        const force = setTimeout(() => {
          server.forceShutdown();
          resolve();
        }, graceMs);
        server.tryShutdown(() => {
          clearTimeout(force);
          resolve();
        });
      });
      return closing;
    },
  };
}
