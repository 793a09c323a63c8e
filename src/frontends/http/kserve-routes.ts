import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import { invalidArg, SERVER_EXITING, SERVER_NOT_READY, ServerError } from "../../core/errors.ts";
import type { ModelLoadOptions, ServedModel, ServerContext } from "../../core/model.ts";
import { callSites, recordCall, recordReadiness } from "../common/api-call-recording.ts";
import { connectionSignal } from "../common/http/connection-signal.ts";
import { createErrorHandler, sendError } from "../common/http/error-reply.ts";
import { isJsonObject, readJsonBody } from "../common/http/json-body.ts";
import { sendJson } from "../common/http/json-text.ts";
import { HEADER_LENGTH, HEADER_LENGTH_NAME, readHeaderLength } from "../common/kserve/binary-tensor.ts";
import { KSERVE_HTTP_ANSWERS, KSERVE_HTTP_STATUS } from "../common/kserve/error-status.ts";
import {
  type DecodedInferRequest,
  decodeInferRequestOffThread,
} from "../common/kserve/infer-request-decoder.ts";
import { encodeInferResponseOffThread } from "../common/kserve/infer-response-encoder.ts";
import { readLoadParameters, repositoryNameRefusal } from "../common/kserve/load-parameters.ts";
import { logSettingsChange, logSettingsWire } from "../common/kserve/log-settings-wire.ts";
import { modelVersion } from "../common/kserve/model-version.ts";
import {
  traceSettingsChangeFromJson,
  traceSettingsJson,
  traceSettingsRequest,
} from "../common/kserve/trace-settings-wire.ts";
import { routedSequenceId, SEQUENCE_ID_HEADER, withRoutedSequenceId } from "../common/sequence-routing.ts";
import { withTraceContext } from "../common/trace-context.ts";
import {
  modelSchemas,
  namedRepositoryControlSchema,
  SERVER_SCHEMAS,
  traceSettingsSchemas,
} from "./kserve-schemas.ts";
import { sharedMemoryRoutes } from "./shared-memory-routes.ts";

// The KServe v2 / Triton HTTP API: health, metadata, configuration, statistics,
// repository control and inference (PROTOCOLS.md §1).

export interface KserveRoutesOptions {
  readonly context: ServerContext;
  readonly bodyLimitBytes: number;
}

export interface ModelParams {
  readonly model: string;
  readonly version?: string;
}

type ModelRequest = FastifyRequest<{ Params: ModelParams }>;

/** Every per-model route exists with and without a version. */
export const MODEL_PATHS = ["/v2/models/:model", "/v2/models/:model/versions/:version"] as const;

const EMPTY_BODY = Buffer.alloc(0);

/** The calls OpenVINO Model Server's metrics count per model. */
const REST_CALLS = callSites("KServe", "REST");

/** Triton's load parameters, as JSON strings: `config`, and files in base64. */
function loadOptions(name: string, body: Buffer | undefined): ModelLoadOptions {
  const parameters = readJsonBody(body)?.parameters;
  if (parameters === undefined) return {};
  if (!isJsonObject(parameters)) throw invalidArg("Unable to parse 'parameters': expected an object");
  const texts = Object.entries(parameters).map(([key, value]) => {
    if (typeof value !== "string")
      throw invalidArg(`Unable to parse load parameter '${key}': expected a string`);
    return [key, value] as const;
  });
  return readLoadParameters(texts, {
    config: (value) => value,
    file: (value) => Buffer.from(value, "base64"),
    unknown: (key) =>
      invalidArg(
        `unexpected load parameter '${key}' for model '${name}': only 'config' and 'file:<path>' are supported`,
      ),
  });
}

function checkUnloadBody(body: Buffer | undefined): void {
  const parameters = readJsonBody(body)?.parameters;
  if (parameters === undefined) return;
  if (!isJsonObject(parameters)) throw invalidArg("Unable to parse 'parameters': expected an object");
  const dependents = parameters.unload_dependents;
  // Accepted for Triton's clients; seqserve models have no dependents (no ensembles).
  if (dependents !== undefined && typeof dependents !== "boolean") {
    throw invalidArg("Unable to parse 'unload_dependents': expected a bool");
  }
}

function readyOnly(body: Buffer | undefined): boolean {
  const ready = readJsonBody(body)?.ready;
  if (ready === undefined) return false;
  if (typeof ready !== "boolean") throw invalidArg("Unable to parse 'ready': expected a bool");
  return ready;
}

export async function kserveRoutes(app: FastifyInstance, options: KserveRoutesOptions): Promise<void> {
  const { context } = options;
  const registry = context.registry;
  app.setErrorHandler(createErrorHandler(KSERVE_HTTP_STATUS, options.bodyLimitBytes));

  app.get("/v2", { schema: SERVER_SCHEMAS.metadata }, (_request, reply) => {
    const { name, version, extensions } = context.metadata;
    return sendJson(reply, { name, version, extensions });
  });
  // A stopping server is neither: Triton answers both UNAVAILABLE "Server exiting".
  app.get("/v2/health/live", { schema: SERVER_SCHEMAS.live }, (_request, reply) =>
    context.isExiting?.() === true
      ? sendError(reply, KSERVE_HTTP_STATUS.UNAVAILABLE, SERVER_EXITING)
      : context.isLive()
        ? reply.code(200).send()
        : sendError(reply, KSERVE_HTTP_ANSWERS.notReady, "server is not live"),
  );
  app.get("/v2/health/ready", { schema: SERVER_SCHEMAS.ready }, (_request, reply) =>
    context.isExiting?.() === true
      ? sendError(reply, KSERVE_HTTP_STATUS.UNAVAILABLE, SERVER_EXITING)
      : context.isReady()
        ? reply.code(200).send()
        : sendError(reply, KSERVE_HTTP_ANSWERS.notReady, "server is not ready"),
  );
  app.get("/v2/models/stats", { schema: SERVER_SCHEMAS.statistics }, (_request, reply) =>
    sendJson(reply, { model_stats: registry.statistics() }),
  );

  for (const path of MODEL_PATHS) {
    const schemas = modelSchemas(path);
    app.get(path, { schema: schemas.metadata }, (request: ModelRequest, reply) => {
      const { model, version } = request.params;
      return recordCall(context.apiCalls, REST_CALLS.ModelMetadata, (identify) => {
        const metadata = registry.metadata(model, modelVersion(version));
        // The version that answered, as the registry names it (`01` is version 1).
        identify(model, metadata.versions.at(-1));
        return sendJson(reply, metadata);
      });
    });
    app.get(`${path}/ready`, { schema: schemas.ready }, (request: ModelRequest, reply) => {
      const { model, version } = request.params;
      // A stopping server's models are not ready, whatever their state: Triton's ModelIsReady
      // refuses UNAVAILABLE "Server not ready" once the server is not READY.
      if (context.isExiting?.() === true)
        return sendError(reply, KSERVE_HTTP_STATUS.UNAVAILABLE, SERVER_NOT_READY);
      const ready = registry.isReady(model, modelVersion(version));
      recordReadiness(context.apiCalls, REST_CALLS.ModelReady, registry, model, modelVersion(version));
      if (ready) return reply.code(200).send();
      const which = version === undefined ? `model '${model}'` : `version ${version} of model '${model}'`;
      return sendError(reply, KSERVE_HTTP_ANSWERS.notReady, `${which} is not ready`);
    });
    app.get(`${path}/config`, { schema: schemas.config }, (request: ModelRequest, reply) => {
      const { model, version } = request.params;
      return sendJson(reply, registry.configJson(model, modelVersion(version)));
    });
    app.get(`${path}/stats`, { schema: schemas.statistics }, (request: ModelRequest, reply) => {
      const { model, version } = request.params;
      return sendJson(reply, { model_stats: registry.statistics(model, modelVersion(version)) });
    });
    app.post(`${path}/infer`, { schema: schemas.infer }, async (request: ModelRequest, reply) => {
      const { model: name, version } = request.params;
      const model = registry.model(name, modelVersion(version));
      return recordCall(context.apiCalls, REST_CALLS.ModelInfer, (identify) => {
        identify(model.name, model.version);
        // Triton refuses it before reading the request, in these words (/generate_stream and the streams serve such models).
        if (model.decoupled)
          throw new ServerError(
            "UNSUPPORTED",
            "HTTP end point doesn't support models with decoupled transaction policy",
          );
        return infer(request, reply, model);
      });
    });
  }

  /** An inference request to `model`. */
  async function infer(
    request: ModelRequest,
    reply: FastifyReply,
    model: ServedModel,
  ): Promise<FastifyReply> {
    const receivedNs = performance.now() * 1e6;
    const body = (request.body as Buffer | undefined) ?? EMPTY_BODY;
    const headerLength = readHeaderLength(request.headers[HEADER_LENGTH], body.byteLength);
    const signal = connectionSignal(request, reply);
    let decoded: DecodedInferRequest | undefined;
    try {
      // A promise only for a large JSON body: an await on every request costs throughput.
      const decoding = decodeInferRequestOffThread(body, headerLength, model, {
        signal,
        principal: request.principal,
        sharedMemory: context.sharedMemory,
        // Triton's HTTP_RECV_START and _END: the head read, the body read.
        received: { frontend: "HTTP", startNs: request.receivedNs, endNs: receivedNs },
      });
      decoded = decoding instanceof Promise ? await decoding : decoding;
      const { traceparent, tracestate } = request.headers;
      const routed = routedSequenceId(request.headers[SEQUENCE_ID_HEADER]);
      const response = await model.infer(
        withTraceContext(withRoutedSequenceId(decoded.request, routed, model), traceparent, tracestate),
      );
      const encoding = encodeInferResponseOffThread(response, decoded.encoding);
      const encoded = encoding instanceof Promise ? await encoding : encoding;
      if (encoded.headerLength !== undefined) reply.header(HEADER_LENGTH_NAME, encoded.headerLength);
      return reply.type(encoded.contentType).send(encoded.body);
    } finally {
      // The regions it named stay open, and the bytes it read count, until it is answered.
      decoded?.encoding.sharedMemory?.use.release();
    }
  }

  // Triton's logging extension: the settings, and (POST) a change to them first.
  const logging = context.logging;
  if (logging !== undefined) {
    app.get("/v2/logging", { schema: SERVER_SCHEMAS.logSettings }, (_request, reply) =>
      sendJson(reply, logSettingsWire(logging.current())),
    );
    app.post("/v2/logging", { schema: SERVER_SCHEMAS.logSettingsUpdate }, (request, reply) =>
      sendJson(
        reply,
        logSettingsWire(
          logging.update(logSettingsChange(readJsonBody(request.body as Buffer | undefined) ?? {})),
        ),
      ),
    );
  }

  // Triton's trace extension: the global settings or a model's, and (POST) a change first.
  const tracing = context.tracing;
  if (tracing !== undefined) {
    for (const path of ["/v2/trace/setting", "/v2/models/:model/trace/setting"]) {
      const schemas = traceSettingsSchemas(path);
      app.get(
        path,
        { schema: schemas.get },
        async (request: FastifyRequest<{ Params: { model?: string } }>, reply) =>
          sendJson(
            reply,
            traceSettingsJson(await traceSettingsRequest(registry, tracing, request.params.model, undefined)),
          ),
      );
      app.post(
        path,
        { schema: schemas.update },
        async (request: FastifyRequest<{ Params: { model?: string } }>, reply) => {
          const readChange = () =>
            traceSettingsChangeFromJson(readJsonBody(request.body as Buffer | undefined) ?? {});
          return sendJson(
            reply,
            traceSettingsJson(
              await traceSettingsRequest(registry, tracing, request.params.model, readChange),
            ),
          );
        },
      );
    }
  }

  if (context.sharedMemory !== undefined) sharedMemoryRoutes(app, context.sharedMemory);

  const index = (request: FastifyRequest, reply: FastifyReply) =>
    sendJson(
      reply,
      // Triton writes a reason only when there is one.
      registry
        .index(readyOnly(request.body as Buffer | undefined))
        .map(({ reason, ...entry }) =>
          reason === undefined || reason === "" ? entry : { ...entry, reason },
        ),
    );
  app.post("/v2/repository/index", { schema: SERVER_SCHEMAS.repositoryIndex }, index);
  // Triton's paths may name a repository: its index ignores the name, and a load or
  // unload that names one is refused (it serves its repositories as one).
  app.post("/v2/repository/:repository/index", { schema: SERVER_SCHEMAS.namedRepositoryIndex }, index);
  for (const action of ["load", "unload"] as const) {
    app.post(
      `/v2/repository/:repository/models/:model/${action}`,
      { schema: namedRepositoryControlSchema(action) },
      () => {
        throw repositoryNameRefusal();
      },
    );
  }
  const load = { schema: SERVER_SCHEMAS.repositoryLoad };
  app.post("/v2/repository/models/:model/load", load, async (request: ModelRequest, reply) => {
    const { model } = request.params;
    await registry.load(model, loadOptions(model, request.body as Buffer | undefined));
    return reply.code(200).send();
  });
  const unload = { schema: SERVER_SCHEMAS.repositoryUnload };
  app.post("/v2/repository/models/:model/unload", unload, async (request: ModelRequest, reply) => {
    const { model } = request.params;
    checkUnloadBody(request.body as Buffer | undefined);
    await registry.unload(model);
    return reply.code(200).send();
  });
}
