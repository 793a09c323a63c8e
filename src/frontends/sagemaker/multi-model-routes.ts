import { existsSync, readdirSync, statSync } from "node:fs";
import { isAbsolute, join, normalize } from "node:path";
import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import { invalidArg } from "../../core/errors.ts";
import type { ModelRegistry } from "../../core/model.ts";
import { HttpError } from "../common/http/http-error.ts";
import { isJsonObject, readJsonBody } from "../common/http/json-body.ts";
import { sendJson } from "../common/http/json-text.ts";
import { MULTI_MODEL_STATUS, multiModelLoadStatus } from "./error-status.ts";
import type { MultiModelEndpoint } from "./multi-model-endpoint.ts";
import { SAGEMAKER_SCHEMAS } from "./sagemaker-schemas.ts";

// SageMaker's multi-model endpoint (MME) contract, as Triton's SageMaker server serves it
// (sagemaker_server.cc): SageMaker unpacks each model's artifact under
// /opt/ml/models/<hash>/model and asks the container to load it, list it, invoke it and
// unload it:
//
//   POST   /models                {"model_name": <name>, "url": <folder>}   200, empty body
//   GET    /models                {"models": [{"modelName", "modelUrl"}]}
//   GET    /models/{name}         {"modelName", "modelUrl"}; 404 when not loaded
//   DELETE /models/{name}         200, empty body; 404 when not loaded
//   POST   /models/{name}/invoke  an invocation of that model (invocation-routes.ts)
//
// A name loaded already gets 409, a load that ran out of memory 507 (so SageMaker unloads
// others and tries again), any other failure 400, each with {"error": …}.

export interface MultiModelRoutesOptions {
  readonly registry: ModelRegistry;
  readonly models: MultiModelEndpoint;
}

type NameParams = { Params: { name: string } };

/** Triton refuses these before it looks at the folder: they are no model's place. */
const SYSTEM_FOLDERS = ["/dev/", "/proc/", "/sys/"];

const isDirectory = (path: string): boolean => {
  try {
    return statSync(path).isDirectory();
  } catch {
    return false;
  }
};

/**
 * The model folder in `url`, as Triton finds it: `url` itself when it holds config.pbtxt,
 * else the model folder inside it (an artifact that unpacks to `<model>/config.pbtxt`).
 * Triton takes the ensemble among several folders; seqserve has no ensembles, and
 * refuses several rather than take one by the order of the disk.
 */
function modelFolder(url: string): string {
  if (!isDirectory(url)) throw invalidArg(`failed to load model: "url" '${url}' is not a folder`);
  if (existsSync(join(url, "config.pbtxt"))) return url;
  const folders = readdirSync(url)
    .filter((entry) => !entry.startsWith(".") && isDirectory(join(url, entry)))
    .sort();
  if (folders.length === 1) return join(url, folders[0]!);
  if (folders.length === 0) {
    throw invalidArg(
      `failed to load model: no model in '${url}' (expected config.pbtxt, or one model folder)`,
    );
  }
  throw invalidArg(
    `failed to load model: '${url}' holds ${folders.length} model folders (${folders.join(", ")}); a multi-model endpoint's model is one`,
  );
}

/** The load request's members, checked as Triton checks them. */
function loadRequest(body: Buffer | undefined): { name: string; url: string } {
  const json = readJsonBody(body);
  if (!isJsonObject(json)) throw invalidArg('a load request is {"model_name": <name>, "url": <folder>}');
  const { model_name: name, url } = json;
  if (typeof name !== "string" || name === "") throw invalidArg('"model_name" must be a non-empty string');
  if (typeof url !== "string" || url === "") throw invalidArg('"url" must be a non-empty string');
  const path = normalize(url);
  if (!isAbsolute(path)) throw invalidArg(`Invalid "url" '${url}': expected an absolute path`);
  if (SYSTEM_FOLDERS.some((folder) => `${path}/`.startsWith(folder))) {
    throw invalidArg(`Invalid "url" '${url}': "url" cannot start with /dev/, /proc/, or /sys/`);
  }
  return { name, url };
}

/** Triton's 404 for a name the endpoint has not loaded: no body. */
const notLoaded = (reply: FastifyReply): FastifyReply => reply.code(404).send();

export async function multiModelRoutes(
  app: FastifyInstance,
  options: MultiModelRoutesOptions,
): Promise<void> {
  const { registry, models } = options;

  app.get("/models", { schema: SAGEMAKER_SCHEMAS.listModels }, (_request, reply) =>
    sendJson(reply, {
      // As Triton: only the models ready to serve.
      models: models
        .entries()
        .filter(([name]) => registry.isReady(name))
        .map(([modelName, modelUrl]) => ({ modelName, modelUrl })),
    }),
  );

  app.get(
    "/models/:name",
    { schema: SAGEMAKER_SCHEMAS.getModel },
    (request: FastifyRequest<NameParams>, reply) => {
      const { name } = request.params;
      const url = models.url(name);
      return url === undefined ? notLoaded(reply) : sendJson(reply, { modelName: name, modelUrl: url });
    },
  );

  app.post("/models", { schema: SAGEMAKER_SCHEMAS.loadModel }, async (request, reply) => {
    const { name, url } = loadRequest(request.body as Buffer | undefined);
    if (models.has(name)) {
      throw new HttpError(
        MULTI_MODEL_STATUS.alreadyLoaded,
        `failed to load '${name}': a model of this name is loaded already (unload it first)`,
      );
    }
    // The endpoint's own models (its repository's) are not this API's to replace.
    if (registry.index().some((entry) => entry.name === name)) {
      throw new HttpError(
        MULTI_MODEL_STATUS.alreadyLoaded,
        `failed to load '${name}': the endpoint's model repository has a model of this name`,
      );
    }
    try {
      await models.load(name, url, () => registry.load(name, { dir: modelFolder(normalize(url)) }));
    } catch (error) {
      throw new HttpError(
        multiModelLoadStatus(error),
        error instanceof Error ? error.message : String(error),
      );
    }
    return reply.code(200).send();
  });

  app.delete(
    "/models/:name",
    { schema: SAGEMAKER_SCHEMAS.unloadModel },
    async (request: FastifyRequest<NameParams>, reply) => {
      const { name } = request.params;
      if (models.url(name) === undefined) return notLoaded(reply);
      try {
        await registry.unload(name);
      } catch (error) {
        throw new HttpError(
          MULTI_MODEL_STATUS.failed,
          error instanceof Error ? error.message : String(error),
        );
      }
      models.delete(name);
      return reply.code(200).send();
    },
  );
}
