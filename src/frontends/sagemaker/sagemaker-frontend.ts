import type { SageMakerPingMode } from "../../config/server-options.ts";
import { ServerError } from "../../core/errors.ts";
import type { ServerContext } from "../../core/model.ts";
import type { Logger } from "../../observability/logger.ts";
import { createErrorHandler } from "../common/http/error-reply.ts";
import { createHttpApp, type HttpApp, type HttpAppOptions } from "../common/http/http-app.ts";
import { unroutedAnswer } from "../common/http/route-methods.ts";
import type { ResponseBudgets } from "../common/response-budget.ts";
import { SAGEMAKER_HTTP_STATUS, sageMakerCoded, sageMakerError, sendSageMakerError } from "./error-status.ts";
import type { InferenceType } from "./generate-invocation.ts";
import { invocationRoutes } from "./invocation-routes.ts";
import { MultiModelEndpoint } from "./multi-model-endpoint.ts";
import { multiModelRoutes } from "./multi-model-routes.ts";
import { SageMakerSessions } from "./sessions.ts";

// The SageMaker frontend: its own fastify server on --sagemaker-port (8080 in a
// SageMaker container), serving the inference-container contract and the runtime API's
// invocation path, with its own error table and error body.

/**
 * What a browser page calling with the AWS SDK sends (SageMaker's headers, and the SDK's
 * signing and retry headers) and must read (the answer's type, sessions, variant, errors).
 */
const SAGEMAKER_CORS_HEADERS = {
  allowed: [
    "x-amzn-sagemaker-session-id",
    "x-amzn-sagemaker-target-model",
    "x-amzn-sagemaker-target-variant",
    "x-amzn-sagemaker-target-container-hostname",
    "x-amzn-sagemaker-inference-id",
    "x-amzn-sagemaker-inference-component",
    "x-amzn-sagemaker-enable-explanations",
    "x-amzn-sagemaker-custom-attributes",
    "x-amzn-sagemaker-accept",
    "x-amz-date",
    "x-amz-security-token",
    "x-amz-content-sha256",
    "x-amz-user-agent",
    "amz-sdk-invocation-id",
    "amz-sdk-request",
  ],
  exposed: [
    "x-amzn-sagemaker-new-session-id",
    "x-amzn-sagemaker-session-id",
    "x-amzn-sagemaker-closed-session-id",
    "x-amzn-sagemaker-content-type",
    "x-amzn-sagemaker-custom-attributes",
    "x-amzn-invoked-production-variant",
    "x-amzn-errortype",
  ],
};

/** SageMaker refuses real-time invocation bodies over 6 MB (6,291,456 bytes); so does seqserve. */
const SAGEMAKER_MAX_BODY_BYTES = 6 * 1024 * 1024;

export interface SageMakerFrontendOptions {
  readonly context: ServerContext;
  readonly logger: Logger;
  /** Seconds a session lives from its opening. */
  readonly sessionTtlSecs: number;
  /** The model for invocations that name none; undefined: the only model served. */
  readonly defaultModel?: string | undefined;
  /** What /invocations is (Triton's SAGEMAKER_TRITON_INFERENCE_TYPE); default infer. */
  readonly inferenceType?: InferenceType | undefined;
  /** What /ping answers for (Triton's SAGEMAKER_TRITON_PING_MODE); default ready. */
  readonly pingMode?: SageMakerPingMode | undefined;
  /** Per-connection budgets of answers waiting for slow readers (streamed answers). */
  readonly budgets?: ResponseBudgets | undefined;
  /** A streamed answer's client that takes nothing for this long is let go; default: never. */
  readonly streamIdleTimeoutMs?: number | undefined;
  /** Connection and time limits, TLS, access control (see createHttpApp). */
  readonly limits?: HttpAppOptions["limits"];
  readonly tls?: HttpAppOptions["tls"];
  readonly access?: HttpAppOptions["access"];
  readonly refusals?: HttpAppOptions["refusals"];
}

export type SageMakerFrontend = HttpApp;

/** The SageMaker server, routes registered, not listening: the caller calls `listen`. */
export function createSageMakerFrontend(options: SageMakerFrontendOptions): SageMakerFrontend {
  const limit = SAGEMAKER_MAX_BODY_BYTES;
  const app = createHttpApp({
    logger: options.logger,
    bodyLimitBytes: limit,
    compressMinBytes: 1024,
    openapi: {
      title: "seqserve: SageMaker inference container API",
      version: options.context.metadata.version,
      description:
        "Amazon SageMaker's inference-container contract (GET /ping, POST /invocations) with stateful sessions, " +
        "and the runtime API's POST /endpoints/{name}/invocations and /invocations-response-stream for the AWS SDKs.",
    },
    limits: options.limits,
    tls: options.tls,
    answerUnrouted: (request, reply, allowed) => {
      const { status, message } = unroutedAnswer(request, reply, allowed);
      const served =
        " (SageMaker serves GET /ping, POST /invocations, POST /endpoints/{name}/invocations, POST /endpoints/{name}/invocations-response-stream, and the multi-model endpoint's /models routes)";
      return sendSageMakerError(reply, status, status === 404 ? `${message}${served}` : message);
    },
    access: options.access,
    refusals: options.refusals,
    errorBody: sageMakerError,
    corsHeaders: SAGEMAKER_CORS_HEADERS,
  });
  const handler = createErrorHandler(SAGEMAKER_HTTP_STATUS, limit, sendSageMakerError);
  app.setErrorHandler((error, request, reply) =>
    handler(error instanceof ServerError ? sageMakerCoded(error) : (error as Error), request, reply),
  );
  const models = new MultiModelEndpoint();
  app.register(multiModelRoutes, { registry: options.context.registry, models });
  app.register(invocationRoutes, {
    models,
    context: options.context,
    sessions: new SageMakerSessions(options.context.registry, options.sessionTtlSecs),
    defaultModel: options.defaultModel,
    inferenceType: options.inferenceType,
    pingMode: options.pingMode,
    budgets: options.budgets,
    idleTimeoutMs: options.streamIdleTimeoutMs,
  });
  return app;
}
