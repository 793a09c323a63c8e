import { readFileSync } from "node:fs";
import type { SpanExporter } from "@opentelemetry/sdk-trace-base";
import { resolveServerOptions, type ServerOptionsInput } from "../config/resolve-server-options.ts";
import { DEFAULT_SECURITY_OPTIONS } from "../config/security-options.ts";
import { DEFAULT_SERVER_OPTIONS } from "../config/server-options.ts";
import type { ModelBackend } from "../core/backend.ts";
import type { ServerContext, ServerMetadata } from "../core/model.ts";
import { Refusals } from "../core/refusals.ts";
import { QueueBudget } from "../core/scheduler/queue-budget.ts";
import type { SequenceTier } from "../core/sequence/sequence-tier.ts";
import { StateBudget } from "../core/sequence/state-budget.ts";
import { untilDeadline } from "../core/timer-delay.ts";
import { AccessPolicy } from "../frontends/common/access/access-policy.ts";
import { ResponseBudgets } from "../frontends/common/response-budget.ts";
import { createGrpcFrontend, type GrpcFrontend } from "../frontends/grpc/grpc-frontend.ts";
import { PartialMessageBytes } from "../frontends/grpc/partial-messages.ts";
import { createHttpFrontend } from "../frontends/http/http-frontend.ts";
import { createSageMakerFrontend } from "../frontends/sagemaker/sagemaker-frontend.ts";
import { logSettingsControl } from "../observability/log-settings.ts";
import { createLogger, type Logger } from "../observability/logger.ts";
import { createMetricsRegistry, type ServerMetrics } from "../observability/metrics.ts";
import { type MetricsServer, startMetricsServer } from "../observability/metrics-server.ts";
import { combineObservers, type ObserverFactory } from "../observability/request-observers.ts";
import { createTracing } from "../observability/tracing.ts";
import { ModelRepository } from "../repository/model-repository.ts";
import { SystemSharedMemory } from "../shared-memory/system-shared-memory.ts";
import { handlerBackend, modelBackends, registryCalls } from "./model-backends.ts";
import { onnxBackend } from "./onnx-backend.ts";
import { openSequenceTier } from "./state-tier.ts";

// The composition root: options → repository → models → frontends. The only place that
// picks concrete implementations (ONNX Runtime, fastify, grpc-js, prom-client).

const packageJson = JSON.parse(readFileSync(new URL("../../package.json", import.meta.url), "utf8")) as {
  version: string;
};
export const SEQSERVE_VERSION = packageJson.version;

/** The KServe / Triton extensions seqserve implements, as `GET /v2` lists them. */
const EXTENSIONS = [
  "sequence",
  // String correlation ids work: the KServe sequence extension asks servers to say so.
  "sequence(string_id)",
  "binary_tensor_data",
  "classification",
  "model_repository",
  "statistics",
  "model_configuration",
  "schedule_policy",
  "parameters",
  "trace",
  "logging",
  "system_shared_memory",
];

export interface RunningServer {
  readonly httpPort: number | undefined;
  readonly grpcPort: number | undefined;
  readonly metricsPort: number | undefined;
  readonly sagemakerPort: number | undefined;
  readonly repository: ModelRepository;
  readonly logger: Logger;
  /**
   * Stops new sequences, lets work finish for --exit-timeout-secs, then closes everything;
   * `clean` is false when the exit timeout cut work short.
   */
  stop(): Promise<{ clean: boolean }>;
}

export interface StartOptions {
  /** The server's logger; by default one built from the log options. */
  readonly logger?: Logger;
  /** Opens the models; by default ONNX Runtime in worker threads. */
  readonly backend?: ModelBackend;
  /**
   * Where traced requests' spans go, instead of the OTLP/HTTP exporter the trace options
   * name (an in-memory exporter in tests, or an embedding program's own).
   */
  readonly traceExporter?: SpanExporter;
}

/** The models that failed to load, as a message; undefined when none did. */
/**
 * Starts seqserve: loads the models, then opens the endpoints the options ask for. The
 * options are the command line's (ServerOptions), each optional; what is left out takes
 * the command line's default.
 */
export async function startServer(
  input: ServerOptionsInput,
  start: StartOptions = {},
): Promise<RunningServer> {
  const options = resolveServerOptions(input);
  const logger =
    start.logger ??
    (await createLogger({ level: options.logLevel, format: options.logFormat, file: options.logFile }));
  let stopping = false;
  let stopped: Promise<{ clean: boolean }> | undefined;
  const security = options.security ?? DEFAULT_SECURITY_OPTIONS;
  const { limits, access } = security;
  const refusals = new Refusals();
  const budgets = new ResponseBudgets(
    limits.maxBufferedResponseBytes,
    limits.maxBufferedResponseBytesTotal,
    refusals,
  );
  const partialMessages = new PartialMessageBytes(limits.grpcMaxPartialMessageBytesTotal, refusals);
  const queueBudget = new QueueBudget(limits.maxQueuedStartBytes, refusals);
  const httpAccess = new AccessPolicy({
    access,
    restrictions: access.httpRestrictions,
    restrictedWord: "API",
    refusals,
  });
  const httpLimits = {
    maxConnections: limits.httpMaxConnections,
    maxHeaderBytes: limits.httpMaxHeaderBytes,
    headerTimeoutMs: limits.httpHeaderTimeoutSecs * 1000,
    requestTimeoutMs: limits.httpRequestTimeoutSecs * 1000,
    keepAliveTimeoutMs: limits.httpKeepAliveTimeoutSecs * 1000,
  };
  const httpSecurity = {
    limits: httpLimits,
    tls: security.httpTls,
    access: { policy: httpAccess, corsAllowOrigins: security.corsAllowOrigins },
    refusals,
  };
  const calls = registryCalls();
  for (const notice of options.notices) logger.info({ event: "option_notice" }, notice);
  for (const warning of options.warnings) logger.warn({ event: "option_deprecated" }, warning);
  const metrics: ServerMetrics | undefined =
    options.metricsPort === undefined && !options.metricsOnHttpPort
      ? undefined
      : createMetricsRegistry(
          options.metrics,
          {
            refusals,
            bufferedResponseBytes: () => budgets.totalBytes,
            bufferedResponsePeakBytes: () => budgets.peakBytes,
            grpcPartialMessageBytes: () => partialMessages.totalBytes,
            queuedStartBytes: () => queueBudget.heldBytes,
          },
          options.ovmsMetrics,
        );
  const tracing = await createTracing(options.tracing, SEQSERVE_VERSION, logger, start.traceExporter);
  const observers: ObserverFactory[] = [(model, version) => tracing.observeRequests(model, version)];
  if (metrics !== undefined) observers.unshift(...metrics.observers);
  let repository: ModelRepository;
  let sequenceTier: SequenceTier | undefined;
  const sharedMemory = new SystemSharedMemory({
    clientRegistration: options.allowClientSharedMemory,
    maxRegions: limits.maxSharedMemoryRegions,
    maxBytes: limits.maxSharedMemoryBytes,
    refusals,
  });
  /**
   * Everything started before the endpoints: released on a failed start and at stop (by
   * the stop's deadline: a state store that does not answer does not hold the exit).
   */
  const release = async (deadlineMs?: number): Promise<void> => {
    sharedMemory.close();
    metrics?.close();
    await tracing.close().catch((error: unknown) => logger.warn({ err: error }, "flushing traces failed"));
    await sequenceTier?.close(deadlineMs);
  };
  try {
    sequenceTier = await openSequenceTier(
      options.stateStore,
      logger,
      metrics === undefined ? [] : [metrics.observeStateStore()],
    );
    repository = await ModelRepository.open({
      sequenceTier,
      repositories: options.modelRepositories,
      ovmsConfigs: options.ovmsConfigs,
      strict: options.strictModelConfig,
      controlMode: options.modelControlMode,
      loadModels: options.loadModels,
      pollSecs: options.repositoryPollSecs,
      singleModel: options.singleModel,
      configPollSecs: options.configPollSecs ?? 0,
      sequenceCleanerPollWaitMinutes: options.sequenceCleanerPollWaitMinutes ?? 5,
      backend: modelBackends(
        start.backend ?? onnxBackend(logger, options.backendSettings, options.onnxWorkerThreads),
        handlerBackend(logger, calls),
      ),
      logger,
      defaultMaxBatchSize: options.backendSettings.defaultMaxBatchSize,
      loadThreadCount: options.modelLoadThreadCount,
      loadRetryCount: options.modelLoadRetryCount,
      // A reload waits for the replaced version's running requests as long as a stop does.
      reloadQuietMs: options.exitTimeoutSecs * 1000,
      maxInstancesPerModel: security.limits.maxInstancesPerModel,
      maxSequenceIdBytes: security.limits.maxSequenceIdBytes,
      refusals,
      stateBudget: new StateBudget(security.limits.maxStateBytes, refusals),
      queueBudget,
      configName: options.modelConfigName,
      observeRequests: combineObservers(observers, (error) =>
        logger.warn({ err: error }, "a request observer failed"),
      ),
    });
  } catch (error) {
    await release();
    throw error;
  }
  calls.attach(repository);
  // As Triton's --exit-on-error: a model that failed to load stops the start.
  const failures = options.exitOnError ? repository.startFailures() : [];
  if (failures.length > 0) {
    await repository.shutdown(Date.now());
    await release();
    throw new Error(`${failures.join("; ")} (--exit-on-error=false serves the other models)`);
  }
  metrics?.watchModels(repository);
  const metadata: ServerMetadata = {
    name: options.serverId,
    version: SEQSERVE_VERSION,
    extensions: EXTENSIONS,
  };
  const context: ServerContext = {
    registry: repository,
    metadata,
    isLive: () => true,
    isExiting: () => stopping,
    // Triton's --strict-readiness: every model ready, or (false) the server running.
    isReady: () => !stopping && (!options.strictReadiness || repository.allReady()),
    logging: logSettingsControl(logger, options.logFile, options.logFormat, options.logVerbose),
    tracing,
    sharedMemory,
    ...(metrics?.apiCalls === undefined ? {} : { apiCalls: metrics.apiCalls }),
  };
  const httpAddress = options.httpAddress ?? options.host;
  const grpcAddress = options.grpcAddress ?? options.host;
  const metricsAddress = options.metricsAddress ?? options.httpAddress ?? options.host;

  const closers: (() => Promise<void>)[] = [];
  let httpPort: number | undefined;
  let grpcPort: number | undefined;
  let metricsPort: number | undefined;
  let sagemakerPort: number | undefined;
  try {
    if (options.httpPort !== undefined) {
      const http = await createHttpFrontend({
        context,
        logger,
        bodyLimitBytes: options.httpBodyLimitBytes,
        streamMaxInFlight: options.httpStreamMaxInflight,
        streamIdleTimeoutMs: limits.httpStreamIdleTimeoutSecs * 1000,
        streamMaxHeldRequestBytes: limits.maxHeldRequestBytes,
        budgets,
        ...(options.metricsOnHttpPort && metrics !== undefined ? { metrics: metrics.registry } : {}),
        ...httpSecurity,
      });
      await http.listen({ host: httpAddress, port: options.httpPort });
      const address = http.server.address();
      httpPort = typeof address === "object" && address !== null ? address.port : options.httpPort;
      closers.push(() => http.close());
    }
    let grpc: GrpcFrontend | undefined;
    if (options.grpcPort !== undefined) {
      grpc = createGrpcFrontend({
        context,
        logger,
        maxMessageBytes: options.grpcMaxMessageBytes,
        keepalive: {
          timeMs: options.grpcKeepaliveTimeMs,
          timeoutMs: options.grpcKeepaliveTimeoutMs,
          permitWithoutCalls: options.grpcKeepalivePermitWithoutCalls,
          ...(options.grpcMaxConnectionAgeMs > 0
            ? {
                maxConnectionAgeMs: options.grpcMaxConnectionAgeMs,
                maxConnectionAgeGraceMs: options.grpcMaxConnectionAgeGraceMs,
              }
            : {}),
        },
        maxInflightPerStream: options.grpcMaxInflightPerStream,
        maxDecompressedBytes: limits.grpcMaxDecompressedBytes,
        maxConnections: limits.grpcMaxConnections,
        handshakeTimeoutMs: limits.grpcHandshakeTimeoutSecs * 1000,
        maxConcurrentStreams: limits.grpcMaxConcurrentStreams,
        budgets,
        streamStallTimeoutMs: limits.grpcStreamStallTimeoutSecs * 1000,
        streamMaxHeldRequestBytes: limits.maxHeldRequestBytes,
        partialMessages,
        tls: security.grpcTls,
        access: new AccessPolicy({
          access,
          restrictions: access.grpcRestrictions,
          restrictedWord: "protocol",
          refusals,
        }),
        refusals,
      });
      grpcPort = await grpc.listen(grpcAddress, options.grpcPort);
      const frontend = grpc;
      closers.push(() => frontend.close(1000));
    }
    if (options.sagemakerPort !== undefined) {
      const sagemaker = createSageMakerFrontend({
        context,
        logger,
        sessionTtlSecs: options.sagemakerSessionTtlSecs ?? DEFAULT_SERVER_OPTIONS.sagemakerSessionTtlSecs!,
        defaultModel: options.sagemakerModel,
        inferenceType: options.sagemakerInferenceType ?? DEFAULT_SERVER_OPTIONS.sagemakerInferenceType!,
        pingMode: options.sagemakerPingMode ?? DEFAULT_SERVER_OPTIONS.sagemakerPingMode!,
        budgets,
        streamIdleTimeoutMs: limits.httpStreamIdleTimeoutSecs * 1000,
        ...httpSecurity,
      });
      await sagemaker.listen({ host: options.host, port: options.sagemakerPort });
      const address = sagemaker.server.address();
      sagemakerPort = typeof address === "object" && address !== null ? address.port : options.sagemakerPort;
      closers.push(() => sagemaker.close());
    }
    if (metrics !== undefined && options.metricsPort !== undefined) {
      const server: MetricsServer = await startMetricsServer(
        metrics.registry,
        metricsAddress,
        options.metricsPort,
        {
          tls: security.httpTls,
          access: (header) => httpAccess.check("metrics", header),
          maxConnections: limits.httpMaxConnections,
          headerTimeoutMs: limits.httpHeaderTimeoutSecs * 1000,
          refusals,
        },
      );
      metricsPort = server.port;
      closers.push(() => server.close());
    }
  } catch (error) {
    for (const close of closers.reverse()) await close().catch(() => {});
    await repository.shutdown(Date.now());
    await release();
    throw error;
  }

  // Each endpoint with the address it is bound to: they differ when --http-address,
  // --grpc-address or --metrics-address is given (someone checking that an endpoint is
  // loopback-only reads it here).
  const endpoint = (address: string, port: number | undefined): string =>
    port === undefined ? "off" : `${address.includes(":") ? `[${address}]` : address}:${port}`;
  // OVMS's --metrics_enable serves them on the REST port, beside a metrics port or instead of it.
  const metricsOnHttp = options.metricsOnHttpPort && metrics !== undefined && httpPort !== undefined;
  const metricsEndpoints = [
    ...(metricsPort === undefined ? [] : [endpoint(metricsAddress, metricsPort)]),
    ...(metricsOnHttp ? [`on HTTP ${endpoint(httpAddress, httpPort)}`] : []),
  ];
  logger.info(
    {
      event: "listening",
      http_address: httpPort === undefined ? null : httpAddress,
      http_port: httpPort ?? null,
      grpc_address: grpcPort === undefined ? null : grpcAddress,
      grpc_port: grpcPort ?? null,
      metrics_address: metricsPort === undefined ? null : metricsAddress,
      metrics_port: metricsPort ?? null,
      metrics_on_http_port: metricsOnHttp,
      sagemaker_address: sagemakerPort === undefined ? null : options.host,
      sagemaker_port: sagemakerPort ?? null,
    },
    `seqserve ${SEQSERVE_VERSION} listening: HTTP ${endpoint(httpAddress, httpPort)}, gRPC ${endpoint(grpcAddress, grpcPort)}, metrics ${metricsEndpoints.length === 0 ? "off" : metricsEndpoints.join(" and ")}, SageMaker ${endpoint(options.host, sagemakerPort)}`,
  );

  return {
    httpPort,
    grpcPort,
    metricsPort,
    sagemakerPort,
    repository,
    logger,
    stop() {
      stopped ??= stopServer();
      return stopped;
    },
  };

  async function stopServer(): Promise<{ clean: boolean }> {
    stopping = true;
    const deadline = Date.now() + options.exitTimeoutSecs * 1000;
    logger.info(
      { event: "stopping", exit_timeout_secs: options.exitTimeoutSecs },
      sequenceTier === undefined
        ? "stopping: no new sequences; waiting for live ones to finish"
        : "stopping: endpoints closing; live sequences go on on the other replicas once their requests in flight are done",
    );
    repository.beginShutdown();
    // What is still in flight, each second, as Triton reports it while it waits.
    const progress = setInterval(() => {
      const busy = repository.inFlight();
      const secondsLeft = Math.max(0, Math.ceil((deadline - Date.now()) / 1000));
      logger.info(
        { event: "stopping_in_flight", seconds_left: secondsLeft, in_flight: busy },
        `Timeout ${secondsLeft}: Found ${busy.length} model versions that have in-flight inferences${busy
          .map((b) => `; model '${b.model}' (version ${b.version}) has ${b.count} in-flight inferences`)
          .join("")}`,
      );
    }, 1000);
    progress.unref();
    const closeEndpoints = async (): Promise<void> => {
      for (const close of closers.reverse())
        await close().catch((error: unknown) => logger.warn({ err: error }, "closing an endpoint failed"));
    };
    // Work in flight as the stop began: only that can be cut short (an idle server stops
    // cleanly even with an exit timeout of 0, as Triton's does).
    const hadWork = repository.inFlight().length > 0;
    let cutShort: boolean;
    if (sequenceTier === undefined) {
      await repository.drain(deadline);
      // The drain ends at the deadline only when it failed what was left.
      cutShort = hadWork && Date.now() >= deadline;
      // A request still answered (a model load, a long run) holds its endpoint's close:
      // past the exit timeout the server goes without it, as Triton exits then.
      if (!(await settledBy(closeEndpoints(), deadline)) && hadWork) cutShort = true;
    } else {
      // A hand-over: the endpoints stop taking connections at once (a balancer sends
      // the next requests elsewhere) while the requests accepted finish and their
      // state is written; the sequences go on on the other replicas.
      const endpointsClosed = closeEndpoints();
      const drained = repository.drain(deadline);
      // The tier goes once the drain is done, or at the deadline whatever Redis does:
      // a write it has not answered by then fails, and the request waiting for it is
      // answered (told to retry) rather than hold the drain, its connection and the
      // endpoint's close until the Redis client's command timeout.
      await untilDeadline(drained, deadline);
      cutShort = hadWork && Date.now() >= deadline;
      await sequenceTier.close(deadline);
      await drained;
      if (!(await settledBy(endpointsClosed, deadline)) && hadWork) cutShort = true;
    }
    clearInterval(progress);
    const transitionsDone = await repository.shutdown(Date.now(), deadline);
    await release(deadline);
    // Past the exit timeout with work left (requests, live sequences, a model load),
    // Triton exits at once and says so, with a failing status: that work was cut short.
    if (cutShort || !transitionsDone) {
      logger.error({ event: "exit_timeout_expired" }, "Exit timeout expired. Exiting immediately.");
      return { clean: false };
    }
    logger.info({ event: "stopped" }, "stopped");
    return { clean: true };
  }
}

/** Waits for `promise` until `deadlineMs`; whether it settled by then. */
async function settledBy(promise: Promise<unknown>, deadlineMs: number): Promise<boolean> {
  let settled = false;
  await untilDeadline(
    promise.finally(() => {
      settled = true;
    }),
    deadlineMs,
  );
  return settled;
}
