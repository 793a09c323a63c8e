import type { FastifyInstance, FastifyRequest } from "fastify";
import { invalidArg, notFound } from "../../core/errors.ts";
import type { SequenceId } from "../../core/infer.ts";
import type {
  SequenceAdmin,
  SequenceInfo,
  SequenceSummary,
  ServedModel,
  ServerContext,
} from "../../core/model.ts";
import { formatSequenceId } from "../../core/sequence/sequence-parameters.ts";
import { createErrorHandler } from "../common/http/error-reply.ts";
import { sendJson } from "../common/http/json-text.ts";
import { KSERVE_HTTP_STATUS } from "../common/kserve/error-status.ts";
import { modelVersion } from "../common/kserve/model-version.ts";
import { MODEL_PATHS, type ModelParams } from "./kserve-routes.ts";
import { modelSchemas } from "./kserve-schemas.ts";

// seqserve's sequence endpoints beside the KServe v2 API, for models served with
// sequence batching:
//
//   GET    /v2/models/{m}[/versions/{v}]/sequences       → {"sequences": [...], "summary": {...}}
//   DELETE /v2/models/{m}[/versions/{v}]/sequences/{id}  → ends the sequence now (404 if unknown)
//
// Ids round-trip exactly: a uint64 id is a JSON number written with its exact digits
// (read it with a parser that keeps big integers, or use `id_type`), a string id is a JSON
// string, and every entry says which with `id_type` ("uint64" or "string"). In the DELETE
// path an id of decimal digits is a uint64 and anything else a string; `?id_type=string`
// addresses a string id made of digits, `?id_type=uint64` insists on a number.
// `expires_at` is when a sequence opened with an expiry (a SageMaker session) ends by
// itself, in ISO 8601 UTC, or null.

export interface SequenceRoutesOptions {
  readonly context: ServerContext;
  readonly bodyLimitBytes: number;
}

interface SequenceParams extends ModelParams {
  readonly id: string;
}

interface SequenceQuery {
  readonly id_type?: string;
}

const UINT64_MAX = (1n << 64n) - 1n;

function idType(id: SequenceId): "uint64" | "string" {
  return typeof id === "bigint" ? "uint64" : "string";
}

function sequenceJson(info: SequenceInfo): Record<string, unknown> {
  return {
    id: info.id,
    id_type: idType(info.id),
    status: info.status,
    age_ms: info.ageMs,
    idle_ms: info.idleMs,
    steps: info.steps,
    queued: info.queued,
    state_bytes: info.stateBytes,
    instance: info.instance ?? null,
    slot: info.slot ?? null,
    expires_at: info.expiresAtMs === undefined ? null : new Date(info.expiresAtMs).toISOString(),
  };
}

function summaryJson(summary: SequenceSummary): Record<string, unknown> {
  return {
    live: summary.live,
    backlog: summary.backlog,
    state_bytes: summary.stateBytes,
    state_allocated_bytes: summary.stateAllocatedBytes,
    ended: summary.ended,
    ...(summary.tier === undefined
      ? {}
      : {
          tier: {
            location: summary.tier.location,
            loaded: summary.tier.loaded,
            conflicts: summary.tier.conflicts,
            handed_over: summary.tier.handedOver,
            write_failures: summary.tier.writeFailures,
          },
        }),
  };
}

function sequencesOf(model: ServedModel): SequenceAdmin {
  if (model.sequences === undefined) {
    throw notFound(`model '${model.name}' has no sequences: it is not served with sequence batching`);
  }
  return model.sequences;
}

/** The id in a DELETE path (see the header comment for the rules). */
export function pathSequenceId(text: string, type: string | undefined): SequenceId {
  if (text === "") throw invalidArg("the sequence id in the path is empty");
  if (type === "string") return text;
  const digits = /^[0-9]+$/.test(text);
  if (type === "uint64" || (type === undefined && digits)) {
    const id = digits ? BigInt(text) : -1n;
    if (id < 0n || id > UINT64_MAX) throw invalidArg(`sequence id '${text}' is not a uint64`);
    return id;
  }
  if (type !== undefined) throw invalidArg(`unknown id_type '${type}': expected 'uint64' or 'string'`);
  return text;
}

export async function sequenceRoutes(app: FastifyInstance, options: SequenceRoutesOptions): Promise<void> {
  const registry = options.context.registry;
  app.setErrorHandler(createErrorHandler(KSERVE_HTTP_STATUS, options.bodyLimitBytes));

  for (const path of MODEL_PATHS) {
    const schemas = modelSchemas(path);
    const list = { schema: schemas.sequences };
    app.get(`${path}/sequences`, list, (request: FastifyRequest<{ Params: ModelParams }>, reply) => {
      const { model, version } = request.params;
      const admin = sequencesOf(registry.model(model, modelVersion(version)));
      return sendJson(reply, {
        sequences: admin.list().map(sequenceJson),
        summary: summaryJson(admin.summary()),
      });
    });
    app.delete(
      `${path}/sequences/:id`,
      { schema: schemas.endSequence },
      async (request: FastifyRequest<{ Params: SequenceParams; Querystring: SequenceQuery }>, reply) => {
        const { model: name, version, id: text } = request.params;
        const model = registry.model(name, modelVersion(version));
        const admin = sequencesOf(model);
        const id = pathSequenceId(text, request.query.id_type);
        // With a shared tier the end is answered once the tier holds it (or says why not).
        if (!(await admin.end(id))) {
          throw notFound(`sequence ${formatSequenceId(id)} is not live in model '${model.name}'`);
        }
        return reply.code(200).send();
      },
    );
  }
}
