import type { FastifyInstance, FastifyRequest } from "fastify";
import type { WebSocket } from "ws";
import type { ModelRegistry, ServedModel, ServerContext } from "../../../core/model.ts";
import type { Refusals } from "../../../core/refusals.ts";
import { createErrorHandler } from "../../common/http/error-reply.ts";
import { HttpError } from "../../common/http/http-error.ts";
import { KSERVE_HTTP_ANSWERS, KSERVE_HTTP_STATUS } from "../../common/kserve/error-status.ts";
import { modelVersion } from "../../common/kserve/model-version.ts";
import { ResponseBudgets } from "../../common/response-budget.ts";
import { routedRequestId, routedSequenceId, SEQUENCE_ID_HEADER } from "../../common/sequence-routing.ts";
import { MODEL_PATHS, type ModelParams } from "../kserve-routes.ts";
import { modelSchemas } from "../kserve-schemas.ts";
import { CLOSE_CODES } from "./close-codes.ts";
import { SequenceOwners } from "./sequence-owners.ts";
import { StreamConnection, type StreamLimits } from "./stream-connection.ts";
import { closeReason } from "./stream-framing.ts";
import { readStreamOptions, type StreamOptions } from "./stream-options.ts";

// GET /v2/models/{m}[/versions/{v}]/stream upgrades to a WebSocket carrying one sequence
// (stream-connection.ts). The model and the query are checked before the upgrade, so a
// refusal is an ordinary HTTP error with the KServe status table and `{"error": …}` body;
// a plain GET (no upgrade) is answered 426.

export interface StreamRoutesOptions {
  readonly context: ServerContext;
  readonly bodyLimitBytes: number;
  /** Messages in flight per connection before reading stops (default 64). */
  readonly maxInFlight?: number;
  /** Request bytes in flight per connection before reading stops (default unbounded). */
  readonly maxHeldRequestBytes?: number;
  /** Bytes waiting to be sent per connection before reading stops (default 1 MiB). */
  readonly writeHighWaterBytes?: number;
  /** A stream with no message and nothing in flight this long is closed; undefined = never. */
  readonly idleTimeoutMs?: number;
  /** Per-connection budgets of answers waiting to be sent (default: unbounded). */
  readonly budgets?: ResponseBudgets;
  readonly refusals?: Refusals;
}

interface StreamTarget {
  readonly model: ServedModel;
  /** The model as served now: a reload swaps a new version in under an open stream. */
  readonly current: () => ServedModel;
  readonly options: StreamOptions;
}

type StreamRequest = FastifyRequest<{ Params: ModelParams; Querystring: Record<string, unknown> }>;

function streamTarget(registry: ModelRegistry, request: StreamRequest): StreamTarget {
  const { model: name, version } = request.params;
  const model = registry.model(name, modelVersion(version));
  const options = readStreamOptions(request.query, model);
  // Routed by X-Sequence-Id, the stream's sequence may be named by the header alone.
  const routed = routedSequenceId(request.headers[SEQUENCE_ID_HEADER]);
  const sequenceId = routedRequestId(options.sequenceId, routed, model);
  // An id from the header alone is checked before the upgrade, as one in the query is.
  if (sequenceId !== undefined && sequenceId !== options.sequenceId) model.sequences?.checkId(sequenceId);
  // A stream that continues a sequence takes it over here: one live here must be its key's.
  if (options.continues && sequenceId !== undefined)
    model.sequences?.checkCaller(sequenceId, request.principal);
  // The version the stream opened on, where a reload of that version moves its sequence;
  // once that version is gone (replaced by a higher one, or retired), the one served
  // without a version, the highest, where its sequence moved. A stream opened on a given
  // version follows its sequence there too.
  const current = (): ServedModel => {
    try {
      return registry.model(name, modelVersion(version) ?? model.version);
    } catch {
      return registry.model(name);
    }
  };
  return {
    model,
    current,
    options: sequenceId === options.sequenceId ? options : { ...options, sequenceId },
  };
}

/**
 * Errors on an open socket. Those `ws` reports are protocol errors (a message over
 * maxPayload, a bad frame): `ws` has already begun closing with the matching code (1009,
 * 1002…), and ending the socket at once, as the plugin's default does, could lose that
 * close frame, so they are only logged. Anything else is a failure of the stream itself.
 */
export function onStreamError(error: Error, socket: WebSocket, request: FastifyRequest): void {
  const code = (error as { code?: unknown }).code;
  if (typeof code === "string" && code.startsWith("WS_ERR_")) {
    request.log.debug({ err: error, url: request.url }, "WebSocket protocol error");
    return;
  }
  request.log.error({ err: error, url: request.url }, "WebSocket stream failed");
  socket.close(CLOSE_CODES.internalError, closeReason(error.message));
}

export async function streamRoutes(app: FastifyInstance, options: StreamRoutesOptions): Promise<void> {
  const registry = options.context.registry;
  const limits: StreamLimits = {
    maxInFlight: Math.max(1, options.maxInFlight ?? 64),
    maxHeldRequestBytes: options.maxHeldRequestBytes ?? Number.POSITIVE_INFINITY,
    writeHighWaterBytes: options.writeHighWaterBytes ?? 1 << 20,
    idleTimeoutMs: options.idleTimeoutMs,
    onIdleClose: () => options.refusals?.refused("http_stream_idle_timeout"),
  };
  const budgets = options.budgets ?? new ResponseBudgets(Number.POSITIVE_INFINITY);
  const owners = new SequenceOwners();
  const targets = new WeakMap<FastifyRequest, StreamTarget>();
  app.setErrorHandler(createErrorHandler(KSERVE_HTTP_STATUS, options.bodyLimitBytes));

  for (const path of MODEL_PATHS) {
    app.route({
      method: "GET",
      url: `${path}/stream`,
      schema: modelSchemas(path).stream,
      // Runs before the upgrade: a throw here is an HTTP error response.
      preValidation: async (request: StreamRequest) => {
        targets.set(request, streamTarget(registry, request));
      },
      handler: () => {
        throw new HttpError(
          KSERVE_HTTP_ANSWERS.streamRequired,
          "this endpoint is a WebSocket: send the GET with 'Upgrade: websocket'",
          {
            upgrade: "websocket",
          },
        );
      },
      wsHandler: (socket: WebSocket, request: FastifyRequest) => {
        const target = targets.get(request);
        targets.delete(request);
        if (target === undefined) {
          socket.close(CLOSE_CODES.internalError, closeReason("the stream lost its model"));
          return;
        }
        new StreamConnection(
          socket,
          target.model,
          target.current,
          target.options,
          limits,
          owners,
          request.log,
          budgets.acquire(request.raw.socket),
          request.principal,
        );
      },
    });
  }
}
