import { readFileSync } from "node:fs";
import { DEFAULT_SECURITY_OPTIONS } from "../config/security-options.ts";
import { DEFAULT_SERVER_OPTIONS, type ServerOptions } from "../config/server-options.ts";
import type { ModelBackend } from "../core/backend.ts";
import type { ServerContext, ServerMetadata } from "../core/model.ts";
import { Refusals } from "../core/refusals.ts";
import { AccessPolicy } from "../frontends/common/access/access-policy.ts";
import { ResponseBudgets } from "../frontends/common/response-budget.ts";
import { createGrpcFrontend, type GrpcFrontend } from "../frontends/grpc/grpc-frontend.ts";
import { createHttpFrontend } from "../frontends/http/http-frontend.ts";
import { createSageMakerFrontend } from "../frontends/sagemaker/sagemaker-frontend.ts";
import { createLogger, type Logger } from "../observability/logger.ts";
import { createMetricsRegistry } from "../observability/metrics.ts";
import { type MetricsServer, startMetricsServer } from "../observability/metrics-server.ts";
import { ModelRepository } from "../repository/model-repository.ts";
import { handlerBackend, modelBackends, registryCalls } from "./model-backends.ts";
import { onnxBackend } from "./onnx-backend.ts";

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
  "model_repository",
  "statistics",
  "model_configuration",
  "schedule_policy",
  "parameters",
];

export interface RunningServer {
  readonly httpPort: number | undefined;
  readonly grpcPort: number | undefined;
  readonly metricsPort: number | undefined;
  readonly sagemakerPort: number | undefined;
  readonly repository: ModelRepository;
  readonly logger: Logger;
  /** Stops new sequences, lets work finish for --exit-timeout-secs, then closes everything. */
  stop(): Promise<void>;
}

export interface StartOptions {
  readonly logger?: Logger;
  readonly backend?: ModelBackend;
}

export async function startServer(options: ServerOptions, start: StartOptions = {}): Promise<RunningServer> {
  const logger = start.logger ?? createLogger({ level: options.logLevel, format: options.logFormat });
  let stopping = false;
  const security = options.security ?? DEFAULT_SECURITY_OPTIONS;
  const { limits, access } = security;
  const refusals = new Refusals();
  const budgets = new ResponseBudgets(limits.maxBufferedResponseBytes, refusals);
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
  const repository = await ModelRepository.open({
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
      start.backend ?? onnxBackend(logger, options.backendSettings),
      handlerBackend(logger, calls),
    ),
    logger,
    defaultMaxBatchSize: options.backendSettings.defaultMaxBatchSize,
    loadThreadCount: options.modelLoadThreadCount,
    maxInstancesPerModel: security.limits.maxInstancesPerModel,
    maxSequenceIdBytes: security.limits.maxSequenceIdBytes,
    refusals,
  });
  calls.attach(repository);
  const metadata: ServerMetadata = { name: "seqserve", version: SEQSERVE_VERSION, extensions: EXTENSIONS };
  const context: ServerContext = {
    registry: repository,
    metadata,
    isLive: () => true,
    isReady: () => !stopping && repository.allReady(),
  };

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
        budgets,
        ...httpSecurity,
      });
      await http.listen({ host: options.host, port: options.httpPort });
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
        keepalive: { timeMs: options.grpcKeepaliveTimeMs, timeoutMs: options.grpcKeepaliveTimeoutMs },
        maxInflightPerStream: options.grpcMaxInflightPerStream,
        maxDecompressedBytes: limits.grpcMaxDecompressedBytes,
        maxConnections: limits.grpcMaxConnections,
        handshakeTimeoutMs: limits.grpcHandshakeTimeoutSecs * 1000,
        maxConcurrentStreams: limits.grpcMaxConcurrentStreams,
        budgets,
        tls: security.grpcTls,
        access: new AccessPolicy({
          access,
          restrictions: access.grpcRestrictions,
          restrictedWord: "protocol",
          refusals,
        }),
        refusals,
      });
      grpcPort = await grpc.listen(options.host, options.grpcPort);
      const frontend = grpc;
      closers.push(() => frontend.close(1000));
    }
    if (options.sagemakerPort !== undefined) {
      const sagemaker = createSageMakerFrontend({
        context,
        logger,
        sessionTtlSecs: options.sagemakerSessionTtlSecs ?? DEFAULT_SERVER_OPTIONS.sagemakerSessionTtlSecs!,
        defaultModel: options.sagemakerModel,
        ...httpSecurity,
      });
      await sagemaker.listen({ host: options.host, port: options.sagemakerPort });
      const address = sagemaker.server.address();
      sagemakerPort = typeof address === "object" && address !== null ? address.port : options.sagemakerPort;
      closers.push(() => sagemaker.close());
    }
    if (options.metricsPort !== undefined) {
      const metrics: MetricsServer = await startMetricsServer(
        createMetricsRegistry(repository, {
          refusals,
          bufferedResponseBytes: () => budgets.totalBytes,
          bufferedResponsePeakBytes: () => budgets.peakBytes,
        }),
        options.host,
        options.metricsPort,
        {
          tls: security.httpTls,
          access: (header) => httpAccess.check("metrics", header),
          maxConnections: limits.httpMaxConnections,
          refusals,
        },
      );
      metricsPort = metrics.port;
      closers.push(() => metrics.close());
    }
  } catch (error) {
    for (const close of closers.reverse()) await close().catch(() => {});
    await repository.shutdown(Date.now());
    throw error;
  }

  logger.info(
    {
      event: "listening",
      host: options.host,
      http_port: httpPort ?? null,
      grpc_port: grpcPort ?? null,
      metrics_port: metricsPort ?? null,
      sagemaker_port: sagemakerPort ?? null,
    },
    `seqserve ${SEQSERVE_VERSION} listening on ${options.host}: HTTP ${httpPort ?? "off"}, gRPC ${grpcPort ?? "off"}, metrics ${metricsPort ?? "off"}, SageMaker ${sagemakerPort ?? "off"}`,
  );

  return {
    httpPort,
    grpcPort,
    metricsPort,
    sagemakerPort,
    repository,
    logger,
    async stop() {
      if (stopping) return;
      stopping = true;
      const deadline = Date.now() + options.exitTimeoutSecs * 1000;
      logger.info(
        { event: "stopping", exit_timeout_secs: options.exitTimeoutSecs },
        "stopping: no new sequences; waiting for live ones to finish",
      );
      repository.beginShutdown();
      await repository.drain(deadline);
      for (const close of closers.reverse())
        await close().catch((error: unknown) => logger.warn({ err: error }, "closing an endpoint failed"));
      await repository.shutdown(Date.now());
      logger.info({ event: "stopped" }, "stopped");
    },
  };
}
