import { type ChannelOptions, Server, ServerCredentials, type ServerInterceptor } from "@grpc/grpc-js";
import type { TlsOptions } from "../../config/security-options.ts";
import type { ServerContext } from "../../core/model.ts";
import type { Refusals } from "../../core/refusals.ts";
import { timerDelay } from "../../core/timer-delay.ts";
import type { Logger } from "../../observability/logger.ts";
import type { AccessPolicy } from "../common/access/access-policy.ts";
import { ResponseBudgets } from "../common/response-budget.ts";
import { tfsGrpcServices } from "../tfs/grpc-services.ts";
import { type GrpcListener, listenForGrpc } from "./connection-listener.ts";
import { DecodeRefusal } from "./decoded-size.ts";
import { decompressionLimit } from "./decompression-limit.ts";
import { widenFlowControlWindows } from "./flow-control-windows.ts";
import { accessInterceptor } from "./grpc-access.ts";
import { healthService } from "./health-service.ts";
import { onEachHttp2Server } from "./http2-servers.ts";
import { inferenceService } from "./inference-service.ts";
import { followPartialMessages, type PartialMessageBytes } from "./partial-messages.ts";
import type { DecodeLimit } from "./proto-definitions.ts";
import type { GrpcServiceRegistration } from "./service-registration.ts";
import { unaryAnswerBudget } from "./unary-answer-budget.ts";

// The gRPC frontend: one grpc-js server carrying inference.GRPCInferenceService,
// grpc.health.v1.Health, and TF-Serving's PredictionService and ModelService. Its port is
// seqserve's own listener (connection-listener.ts), which bounds connections and the time
// to the HTTP/2 preface; interceptors bound what a compressed message may inflate to and
// check every call's access before its first message is read; every stream's DATA is
// followed to bound what messages received in part hold (partial-messages.ts).

/** Triton's default message limit (INT32_MAX): tensors are routinely far above grpc-js's 4 MiB. */
const DEFAULT_MAX_MESSAGE_BYTES = 2 ** 31 - 1;
const DEFAULT_MAX_INFLIGHT_PER_STREAM = 128;

interface GrpcKeepaliveOptions {
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
const DEFAULT_KEEPALIVE: GrpcKeepaliveOptions = {
  timeMs: 7_200_000,
  timeoutMs: 20_000,
  permitWithoutCalls: false,
};

export interface GrpcFrontendOptions {
  readonly context: ServerContext;
  readonly logger: Logger;
  /** Largest message received or sent, in bytes (default INT32_MAX, as Triton). */
  readonly maxMessageBytes?: number;
  readonly keepalive?: Partial<GrpcKeepaliveOptions>;
  /** Unanswered requests per ModelStreamInfer stream before the server stops reading it. */
  readonly maxInflightPerStream?: number;
  /** What a compressed message (or a TensorProto filling its shape) may expand to; default unlimited. */
  readonly maxDecompressedBytes?: number;
  /** Open connections at once; default unlimited. */
  readonly maxConnections?: number;
  /** Time a connection has to finish TLS and send the HTTP/2 preface, in ms (default 10 s). */
  readonly handshakeTimeoutMs?: number;
  /** Calls at once on one connection; default unlimited. */
  readonly maxConcurrentStreams?: number;
  /** Per-connection budgets of answers waiting for slow readers (default unbounded). */
  readonly budgets?: ResponseBudgets;
  /** A ModelStreamInfer client that takes no answer for this long has its stream reset (default never). */
  readonly streamStallTimeoutMs?: number;
  /** Request bytes a ModelStreamInfer stream holds unanswered before it stops reading (default unbounded). */
  readonly streamMaxHeldRequestBytes?: number;
  /** The server-wide bound on messages received in part (default unbounded, and not followed). */
  readonly partialMessages?: PartialMessageBytes;
  readonly tls?: TlsOptions | undefined;
  readonly access?: AccessPolicy | undefined;
  readonly refusals?: Refusals | undefined;
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
  if (options.maxConcurrentStreams !== undefined) {
    channelOptions["grpc.max_concurrent_streams"] = options.maxConcurrentStreams;
  }
  return channelOptions;
}

function interceptors(
  options: GrpcFrontendOptions,
  budgets: ResponseBudgets,
  decodeLimit: DecodeLimit | undefined,
): ServerInterceptor[] {
  const chain: ServerInterceptor[] = [];
  // First: it needs grpc-js's own call.
  if (options.maxDecompressedBytes !== undefined) {
    chain.push(decompressionLimit(options.maxDecompressedBytes, options.refusals, decodeLimit?.refusal));
  }
  if (options.access !== undefined && !options.access.unrestricted)
    chain.push(accessInterceptor(options.access));
  chain.push(unaryAnswerBudget(budgets));
  return chain;
}

function credentials(tls: TlsOptions | undefined): ServerCredentials {
  if (tls === undefined) return ServerCredentials.createInsecure();
  return ServerCredentials.createSsl(
    tls.rootCert ?? null,
    [{ private_key: tls.key, cert_chain: tls.cert }],
    tls.mutual,
  );
}

export function createGrpcFrontend(options: GrpcFrontendOptions): GrpcFrontend {
  const { context, logger } = options;
  const budgets = options.budgets ?? new ResponseBudgets(Number.POSITIVE_INFINITY);
  // Messages are bounded by what they decode to as by what they inflate to.
  const decodeLimit: DecodeLimit | undefined =
    options.maxDecompressedBytes === undefined
      ? undefined
      : { maxBytes: options.maxDecompressedBytes, refusal: new DecodeRefusal() };
  const server = new Server({
    ...serverOptions(options),
    interceptors: interceptors(options, budgets, decodeLimit),
  });
  widenFlowControlWindows(server);
  const partialMessages = options.partialMessages;
  if (partialMessages !== undefined) {
    onEachHttp2Server(server, (http2Server) => followPartialMessages(http2Server, partialMessages));
  }
  const services: GrpcServiceRegistration[] = [
    inferenceService({
      context,
      logger,
      maxInflightPerStream: options.maxInflightPerStream ?? DEFAULT_MAX_INFLIGHT_PER_STREAM,
      maxMessageBytes: options.maxMessageBytes ?? DEFAULT_MAX_MESSAGE_BYTES,
      budgets,
      streamStallTimeoutMs: options.streamStallTimeoutMs,
      streamMaxHeldRequestBytes: options.streamMaxHeldRequestBytes,
      refusals: options.refusals,
      decodeLimit,
    }),
    healthService({ context, logger }),
    ...tfsGrpcServices({
      context,
      logger,
      ...(options.maxDecompressedBytes === undefined
        ? {}
        : { maxExpandedBytes: options.maxDecompressedBytes }),
      ...(decodeLimit === undefined ? {} : { decodeLimit }),
    }),
  ];
  for (const service of services) server.addService(service.definition, service.implementation);
  let closing: Promise<void> | undefined;
  let listener: GrpcListener | undefined;

  return {
    async listen(host, port) {
      const injector = server.createConnectionInjector(credentials(options.tls));
      listener = await listenForGrpc(injector, host, port, {
        maxConnections: options.maxConnections ?? Number.POSITIVE_INFINITY,
        handshakeTimeoutMs: options.handshakeTimeoutMs ?? 10_000,
        refusals: options.refusals,
      });
      logger.info({ host, port: listener.port, tls: options.tls !== undefined }, "gRPC frontend listening");
      return listener.port;
    },
    close(graceMs = 0) {
      closing ??= new Promise<void>((resolve) => {
        const closed = listener?.close() ?? Promise.resolve();
        const finish = (): void => {
          // Connections that never became HTTP/2 sessions are not grpc-js's to close.
          listener?.destroyConnections();
          closed.then(() => resolve());
        };
        const force = setTimeout(() => {
          server.forceShutdown();
          finish();
        }, timerDelay(graceMs));
        server.tryShutdown(() => {
          clearTimeout(force);
          finish();
        });
      });
      return closing;
    },
  };
}
