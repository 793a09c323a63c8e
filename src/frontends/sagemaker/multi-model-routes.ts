import { existsSync, readdirSync, statSync } from "node:fs";
import { dirname, isAbsolute, join, normalize } from "node:path";
import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import { invalidArg } from "../../core/errors.ts";
import type { ModelRegistry } from "../../core/model.ts";
import { HttpError } from "../common/http/http-error.ts";
import { isJsonObject, readJsonBody } from "../common/http/json-body.ts";
import { sendJson } from "../common/http/json-text.ts";
import { multiModelLoadStatus, SAGEMAKER_HTTP_ANSWERS, SAGEMAKER_HTTP_STATUS } from "./error-status.ts";
import type { MultiModelEndpoint } from "./multi-model-endpoint.ts";
import { SAGEMAKER_SCHEMAS } from "./sagemaker-schemas.ts";

// SageMaker's multi-model endpoint (MME) contract, as Triton's SageMaker server serves it
// (sagemaker_server.cc): SageMaker unpacks each model's artifact under
// /opt/ml/models/<hash>/model and asks the container to load it, list it, invoke it and
// unload it, calling it by its hash (model_name):
//
//   POST   /models                {"model_name": <hash>, "url": <folder>}   200, empty body
//   GET    /models                {"models": [{"modelName", "modelUrl"}]}
//   GET    /models/{hash}         {"modelName", "modelUrl"}; 404 when not loaded
//   DELETE /models/{hash}         200, empty body; 404 when not loaded
//   POST   /models/{hash}/invoke  an invocation of that model (invocation-routes.ts)
//
// The load's X-Amzn-SageMaker-Target-Model (the artifact's name) is the name the model is
// served under, else the hash (multi-model-endpoint.ts). A hash or a served name loaded
// already gets 409, a load that ran out of memory 507 (so SageMaker unloads others and
// tries again), any other failure 400, each with {"error": …}.

export interface MultiModelRoutesOptions {
  readonly registry: ModelRegistry;
  readonly models: MultiModelEndpoint;
}

/** The path's {name}: SageMaker's model_name, the artifact's hash. */
type NameParams = { Params: { name: string } };

/** The artifact's name SageMaker sends with a load: the name Triton serves the model under. */
const TARGET_MODEL = "x-amzn-sagemaker-target-model";

/** Triton refuses these before it looks at the folder: they are no model's place. */
const SYSTEM_FOLDERS = ["/dev/", "/proc/", "/sys/"];

const isDirectory = (path: string): boolean => {
  try {
    return statSync(path).isDirectory();
  } catch {
    return false;
  }
};

interface ModelFolder {
  /** The folder holding config.pbtxt. */
  readonly folder: string;
  /**
   * The folder Triton registers as its repository, which it answers as modelUrl: the url's
   * parent when the url holds config.pbtxt (/opt/ml/models/<hash>), else the url.
   */
  readonly modelUrl: string;
}

/**
 * The model folder in `url` (normalized), as Triton finds it: `url` itself when it holds
 * config.pbtxt, else the model folder inside it (an artifact that unpacks to
 * `<model>/config.pbtxt`). Triton takes the ensemble among several folders; seqserve has
 * no ensembles, and refuses several rather than take one by the order of the disk.
 */
function modelFolder(url: string): ModelFolder {
  if (!isDirectory(url)) throw invalidArg(`failed to load model: "url" '${url}' is not a folder`);
  if (existsSync(join(url, "config.pbtxt"))) return { folder: url, modelUrl: dirname(url) };
  const folders = readdirSync(url)
    .filter((entry) => !entry.startsWith(".") && isDirectory(join(url, entry)))
    .sort();
  if (folders.length === 1) return { folder: join(url, folders[0]!), modelUrl: url };
  if (folders.length === 0) {
    throw invalidArg(
      `failed to load model: no model in '${url}' (expected config.pbtxt, or one model folder)`,
    );
  }
  throw invalidArg(
    `failed to load model: '${url}' holds ${folders.length} model folders (${folders.join(", ")}); a multi-model endpoint's model is one`,
  );
}

interface LoadRequest {
  /** SageMaker's model_name, the artifact's hash: what the /models routes call the model. */
  readonly hash: string;
  /** The name the model is served under: the TargetModel, else the hash. */
  readonly served: string;
  /** The url, normalized. */
  readonly url: string;
}

/** The load request's members and TargetModel, checked as Triton checks them. */
function loadRequest(request: FastifyRequest): LoadRequest {
  const json = readJsonBody(request.body as Buffer | undefined);
  if (!isJsonObject(json)) throw invalidArg('a load request is {"model_name": <name>, "url": <folder>}');
  const { model_name: hash, url } = json;
  if (typeof hash !== "string" || hash === "") throw invalidArg('"model_name" must be a non-empty string');
  if (typeof url !== "string" || url === "") throw invalidArg('"url" must be a non-empty string');
  const path = normalize(url);
  if (!isAbsolute(path)) throw invalidArg(`Invalid "url" '${url}': expected an absolute path`);
  if (SYSTEM_FOLDERS.some((folder) => `${path}/`.startsWith(folder))) {
    throw invalidArg(`Invalid "url" '${url}': "url" cannot start with /dev/, /proc/, or /sys/`);
  }
  const target = request.headers[TARGET_MODEL];
  const served = Array.isArray(target) ? target.join(",") : target;
  return { hash, served: served === undefined || served === "" ? hash : served, url: path };
}

/** Triton's 404 for a name the endpoint has not loaded: no body. */
const notLoaded = (reply: FastifyReply): FastifyReply => reply.code(SAGEMAKER_HTTP_STATUS.NOT_FOUND).send();

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
        .filter(([, model]) => registry.isReady(model.served))
        .map(([modelName, model]) => ({ modelName, modelUrl: model.url })),
    }),
  );

  app.get(
    "/models/:name",
    { schema: SAGEMAKER_SCHEMAS.getModel },
    (request: FastifyRequest<NameParams>, reply) => {
      const { name: hash } = request.params;
      const model = models.model(hash);
      return model === undefined
        ? notLoaded(reply)
        : sendJson(reply, { modelName: hash, modelUrl: model.url });
    },
  );

  app.post("/models", { schema: SAGEMAKER_SCHEMAS.loadModel }, async (request, reply) => {
    const { hash, served, url } = loadRequest(request);
    if (models.has(hash)) {
      throw new HttpError(
        SAGEMAKER_HTTP_ANSWERS.alreadyLoaded,
        `failed to load '${hash}': a model of this name is loaded already (unload it first)`,
      );
    }
    const as = served === hash ? "" : ` as TargetModel '${served}'`;
    if (models.serves(served)) {
      throw new HttpError(
        SAGEMAKER_HTTP_ANSWERS.alreadyLoaded,
        `failed to load '${hash}'${as}: a model is served under '${served}' already (unload it first)`,
      );
    }
    // The endpoint's own models (its repository's) are not this API's to replace.
    if (registry.index().some((entry) => entry.name === served)) {
      throw new HttpError(
        SAGEMAKER_HTTP_ANSWERS.alreadyLoaded,
        `failed to load '${hash}'${as}: the endpoint's model repository has a model of this name`,
      );
    }
    try {
      await models.load(hash, served, async () => {
        const { folder, modelUrl } = modelFolder(url);
        await registry.load(served, { dir: folder });
        return modelUrl;
      });
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
      const { name: hash } = request.params;
      const model = models.model(hash);
      if (model === undefined) return notLoaded(reply);
      try {
        await registry.unload(model.served);
      } catch (error) {
        throw new HttpError(
          SAGEMAKER_HTTP_ANSWERS.loadFailed,
          error instanceof Error ? error.message : String(error),
        );
      }
      models.delete(hash);
      return reply.code(200).send();
    },
  );
}
