import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import { invalidArg, ServerError } from "../../core/errors.ts";
import type { ServedModel, ServerContext } from "../../core/model.ts";
import type { Tensor } from "../../core/tensor.ts";
import { callSites, type IdentifyModel, recordCall } from "../common/api-call-recording.ts";
import { watchDisconnect } from "../common/http/client-disconnect.ts";
import { createErrorHandler } from "../common/http/error-reply.ts";
import { isJsonObject, type JsonObject } from "../common/http/json-body.ts";
import {
  collectLongNumbers,
  elementSourceTexts,
  exactInteger,
  longNumberTokens,
  memberSourceText,
} from "../common/json-source-text.ts";
import type { SourceTokens } from "../common/kserve/json-tensor.ts";
import { routedSequenceId, SEQUENCE_ID_HEADER } from "../common/sequence-routing.ts";
import { type NestedTensor, parseJson, type WritePart } from "../json-thread/json-thread.ts";
import { isPackedArray, isPackedRows } from "../json-thread/packed-json.ts";
import { jsonElements, writeParts } from "../json-thread/write-parts.ts";
import { ovmsInvalid, TFS_HTTP_STATUS, tfsError } from "./error-status.ts";
import { modelStatus, type Signature, signatureOf, type VersionStatus } from "./model-info.ts";
import { scalarOutputsAsModel } from "./model-scalars.ts";
import {
  DEFAULT_SIGNATURE,
  findModel,
  isStateful,
  type ModelSelector,
  predict,
  sequenceOf,
} from "./predict.ts";
import { decodeRestTensor, isNamedMap } from "./rest-json.ts";
import {
  SEQUENCE_CONTROL_INPUT,
  SEQUENCE_ID_INPUT,
  SEQUENCE_STEP_INPUT,
  type SpecialInput,
  specialInputsOf,
} from "./special-inputs.ts";
import { tfDtypeName } from "./tf-dtype.ts";

// TF-Serving's REST API on the HTTP port, beside KServe v2, with OpenVINO Model Server's
// stateful semantics:
//   POST /v1/models/{m}[/versions/{v}|/labels/{l}]:predict   row ("instances") or column ("inputs")
//   GET  /v1/models/{m}[/versions/{v}|/labels/{l}]           model status
//   GET  /v1/models/{m}[/versions/{v}|/labels/{l}]/metadata  signature_def
//   GET  /v1/config                                           every model's status (OVMS)
//   POST /v1/config/reload                                    the config files applied now (OVMS)
// Errors are {"error": "<message>"} with the family's statuses (error-status.ts).

export interface TfsRestOptions {
  readonly context: ServerContext;
  readonly bodyLimitBytes: number;
}

const UINT64_MAX = (1n << 64n) - 1n;
const UINT32_MAX = 2n ** 32n - 1n;

interface ModelPath extends ModelSelector {
  /** What follows the model: "" (status), "/metadata", or ":predict" and the like. */
  readonly action: string;
}

/**
 * Reads `{m}[/versions/{v}|/labels/{l}]{rest}` (the part after /v1/models/, which the router
 * has percent-decoded already: a "%" left in it is part of the name).
 */
function parseModelPath(path: string): ModelPath {
  const match = /^([^/:]+)(?:\/versions\/([^/:]+)|\/labels\/([^/:]+))?(\/metadata|:[a-z]+)?$/.exec(path);
  if (match === null)
    throw new ServerError("NOT_FOUND", `Requested REST resource not found: /v1/models/${path}`);
  const [, name, version, label, action] = match;
  if (version !== undefined && !/^\d+$/.test(version)) {
    throw invalidArg(`Could not parse model version in request: '${version}' is not a version number`);
  }
  return {
    name: name!,
    version: version === undefined || Number(version) === 0 ? undefined : String(Number(version)),
    label,
    action: action ?? "",
  };
}

/** A predict body's JSON text, decoded when first read (only 64-bit integers past 2^53 need it). */
interface RestSource {
  readonly text: string;
  /** No special input is written as a fraction (found where the body was parsed). */
  readonly specialInputsAreIntegers?: boolean;
}

interface RestBody {
  readonly json: JsonObject;
  readonly source: RestSource;
}

function restBody(json: unknown, source: RestSource): RestBody {
  if (!isJsonObject(json)) throw ovmsInvalid("rest_body");
  return { json, source };
}

/**
 * The predict body's JSON; a body of OFF_THREAD_JSON_BYTES or more is parsed on the JSON
 * thread, its tensors' data packed (a promise only then: see decodeInferRequestOffThread).
 */
const EMPTY_BODY = Buffer.alloc(0);

function parseBody(body: Buffer = EMPTY_BODY): RestBody | Promise<RestBody> {
  // The text 64-bit integers are read from is the body's own: their tokens are found in
  // it as well with NaN and Infinity unmarked.
  const parsed = parseJson(body, body.byteLength, "tfs");
  return parsed instanceof Promise
    ? parsed.then((p) => restBody(p.value, p))
    : restBody(parsed.value, parsed);
}

/** A special input from the JSON: a flat list of unsigned integers (exact beyond 2^53). */
function specialInput(
  value: unknown,
  source: RestSource,
  name: string,
  max: bigint,
): SpecialInput | undefined {
  if (value === undefined) return undefined;
  if (!Array.isArray(value)) throw ovmsInvalid("rest_input");
  let tokens: ReadonlyMap<number, string> | undefined;
  const values = value.map((item, i) => {
    if (typeof item !== "number" || !Number.isInteger(item) || item < 0) throw ovmsInvalid("rest_input");
    if (Number.isSafeInteger(item)) return BigInt(item);
    tokens ??= tokensAt(source, ["inputs", name])();
    const exact = exactInteger(tokens.get(i) ?? "", 0n, max);
    if (exact == null) throw ovmsInvalid("rest_input");
    return exact;
  });
  if (values.some((v) => v > max)) throw ovmsInvalid("rest_input");
  // OVMS takes only unsigned integers (rapidjson's IsUint64): `5.0` or `1e3`, which
  // JSON.parse makes integers, are refused as any other value that is not one. The text
  // is read only where the body's first look found one may be.
  if (source.specialInputsAreIntegers !== true) {
    const texts = elementSourceTexts(memberSourceText(source.text, ["inputs", name]) ?? "");
    if (texts.some((text) => !/^\d+$/.test(text))) throw ovmsInvalid("rest_input");
  }
  return { dims: [values.length], values };
}

/** The model's data inputs (what a request may name), by name. */
function inputTypes(model: ServedModel): Map<string, ServedModel["inputs"][number]> {
  return new Map(model.inputs.map((i) => [i.name, i]));
}

function decodeNamed(
  model: ServedModel,
  name: string,
  value: unknown,
  tokens: SourceTokens,
): [string, Tensor] {
  const input = inputTypes(model).get(name);
  if (input === undefined) throw invalidArg(`unexpected inference input '${name}' for model '${model.name}'`);
  return [name, decodeRestTensor(name, input.datatype, value, tokens)];
}

/** No 64-bit integer past 2^53 to read: for data the JSON thread packed. */
const NO_TOKENS: SourceTokens = () => new Map();

/** The number tokens of the value at `path` in the request's text (64-bit integers are read from them). */
const tokensAt =
  (source: RestSource, path: readonly (string | number)[]): SourceTokens =>
  () =>
    longNumberTokens(memberSourceText(source.text, path) ?? "");

/** The model's only data input, for a request that does not name it. */
function onlyInput(model: ServedModel): string {
  if (model.inputs.length !== 1) {
    throw invalidArg(
      `model '${model.name}' has ${model.inputs.length} inputs (${model.inputs.map((i) => i.name).join(", ")}): name them in an object`,
    );
  }
  return model.inputs[0]!.name;
}

interface DecodedPredict {
  readonly inputs: Map<string, Tensor>;
  /** The number of instances of a row-form request; undefined for the column form. */
  readonly rows: number | undefined;
}

/** A stateful model's special inputs in the column form (read before the data, as OVMS does). */
function columnSpecials(
  model: ServedModel,
  value: unknown,
  source: RestSource,
): [SpecialInput | undefined, SpecialInput | undefined, SpecialInput | undefined] {
  if (!isStateful(model) || !isNamedMap(value)) return [undefined, undefined, undefined];
  return [
    specialInput(value[SEQUENCE_ID_INPUT], source, SEQUENCE_ID_INPUT, UINT64_MAX),
    specialInput(value[SEQUENCE_CONTROL_INPUT], source, SEQUENCE_CONTROL_INPUT, UINT32_MAX),
    specialInputsOf(model).has(SEQUENCE_STEP_INPUT)
      ? specialInput(value[SEQUENCE_STEP_INPUT], source, SEQUENCE_STEP_INPUT, UINT64_MAX)
      : undefined,
  ];
}

/** Column form: `"inputs": {name: value, …}` or a bare value for a one-input model. */
function decodeColumns(model: ServedModel, value: unknown, source: RestSource): DecodedPredict {
  const inputs = new Map<string, Tensor>();
  if (!isNamedMap(value)) {
    inputs.set(...decodeNamed(model, onlyInput(model), value, tokensAt(source, ["inputs"])));
    return { inputs, rows: undefined };
  }
  const specials = isStateful(model) ? specialInputsOf(model) : undefined;
  for (const name in value) {
    if (specials?.has(name) === true) continue;
    inputs.set(...decodeNamed(model, name, value[name], tokensAt(source, ["inputs", name])));
  }
  return { inputs, rows: undefined };
}

/** Row form: `"instances": [{name: value, …}, …]` or a list of bare values for a one-input model. */
function decodeRows(model: ServedModel, instances: unknown, source: RestSource): DecodedPredict {
  if (!Array.isArray(instances) && !isPackedArray(instances) && !isPackedRows(instances))
    throw invalidArg("Invalid JSON structure. Nonamed instance is not an array.");
  if (isStateful(model)) {
    throw invalidArg(
      `model '${model.name}' is stateful: send its inputs, with sequence_id and sequence_control_input, in the column format ("inputs")`,
    );
  }
  const inputs = new Map<string, Tensor>();
  // Packed on the JSON thread (never empty, every instance alike): all numbers or strings,
  // so no 64-bit integer is to be read from the text.
  if (isPackedRows(instances)) {
    for (const [name, column] of instances.named) inputs.set(...decodeNamed(model, name, column, NO_TOKENS));
    return { inputs, rows: instances.rows };
  }
  if (isPackedArray(instances)) {
    inputs.set(...decodeNamed(model, onlyInput(model), instances, NO_TOKENS));
    return { inputs, rows: instances.shape[0] };
  }
  return decodeRowList(model, instances as unknown[], inputs, source);
}

/** Row form as parsed: instances that are objects naming inputs, or bare values. */
function decodeRowList(
  model: ServedModel,
  instances: unknown[],
  inputs: Map<string, Tensor>,
  source: RestSource,
): DecodedPredict {
  if (instances.length === 0) throw invalidArg("Invalid JSON structure. Missing instances in row format");
  const named = instances.every(isNamedMap);
  if (!named) {
    if (instances.some(isNamedMap)) {
      throw invalidArg("Could not detect neither named or nonamed format: instances mix objects and values");
    }
    inputs.set(...decodeNamed(model, onlyInput(model), instances, tokensAt(source, ["instances"])));
    return { inputs, rows: instances.length };
  }
  const names = Object.keys(instances[0] as JsonObject);
  for (const instance of instances as JsonObject[]) {
    const keys = Object.keys(instance);
    if (keys.length !== names.length || keys.some((k) => !names.includes(k))) {
      throw invalidArg(
        `Invalid JSON structure. Every instance must name the same inputs: [${names.join(", ")}] and [${keys.join(", ")}] differ`,
      );
    }
  }
  // The instances' texts are found once: each input's tokens are then read from them.
  let instanceTexts: string[] | undefined;
  for (const name of names) {
    const tokens = () => {
      instanceTexts ??= elementSourceTexts(memberSourceText(source.text, ["instances"]) ?? "");
      // Element indices run on across the instances, as their values are stacked.
      const tokens = new Map<number, string>();
      let offset = 0;
      for (const instance of instanceTexts) {
        offset += collectLongNumbers(memberSourceText(instance, [name]) ?? "", tokens, offset);
      }
      return tokens;
    };
    inputs.set(
      ...decodeNamed(
        model,
        name,
        (instances as JsonObject[]).map((instance) => instance[name]),
        tokens,
      ),
    );
  }
  return { inputs, rows: instances.length };
}

const restPart = (output: Tensor & { name: string }, row?: number): NestedTensor =>
  row === undefined
    ? { form: "rest", name: output.name, tensor: output }
    : { form: "rest", name: output.name, tensor: output, row };

/** `{"outputs": …}`: an object by name, or the bare value of a lone output. */
function columnParts(
  outputs: readonly (Tensor & { name: string })[],
  sequenceId: bigint | undefined,
): WritePart[] {
  if (outputs.length === 1 && sequenceId === undefined) return ['{"outputs":', restPart(outputs[0]!), "}"];
  const parts: WritePart[] = ['{"outputs":{'];
  for (const [i, output] of outputs.entries()) {
    parts.push(`${i > 0 ? "," : ""}${JSON.stringify(output.name)}:`, restPart(output));
  }
  if (sequenceId !== undefined) {
    parts.push(`${outputs.length > 0 ? "," : ""}${JSON.stringify(SEQUENCE_ID_INPUT)}:[${sequenceId}]`);
  }
  parts.push("}}");
  return parts;
}

/** `{"predictions": […]}`: one entry per instance (a bare value when the model has one output). */
function rowParts(outputs: readonly (Tensor & { name: string })[], rows: number): WritePart[] {
  for (const output of outputs) {
    if (output.shape[0] !== rows) {
      throw new ServerError(
        "INTERNAL",
        `output '${output.name}' has shape [${output.shape.join(",")}], which does not split into ${rows} predictions`,
      );
    }
  }
  const parts: WritePart[] = ['{"predictions":['];
  for (let r = 0; r < rows; r++) {
    if (r > 0) parts.push(",");
    if (outputs.length === 1) parts.push(restPart(outputs[0]!, r));
    else {
      for (const [i, output] of outputs.entries()) {
        parts.push(`${i === 0 ? "{" : ","}${JSON.stringify(output.name)}:`, restPart(output, r));
      }
      parts.push("}");
    }
  }
  parts.push("]}");
  return parts;
}

function statusJson(statuses: readonly VersionStatus[]): object {
  return {
    model_version_status: statuses.map((s) => ({
      version: s.version,
      state: s.state,
      status: { error_code: s.errorCode, error_message: s.errorMessage },
    })),
  };
}

/** GetModelMetadataResponse as OVMS writes it (protobuf's JSON mapping, every field printed). */
function metadataJson(name: string, version: string, signature: Signature): object {
  const infos = (map: Signature["inputs"]) =>
    Object.fromEntries(
      [...map].map(([key, info]) => [
        key,
        {
          name: info.name,
          dtype: tfDtypeName(info.dtype),
          tensorShape: {
            dim: info.dims.map((size) => ({ size: String(size), name: "" })),
            unknownRank: false,
          },
        },
      ]),
    );
  return {
    modelSpec: { name, signatureName: "", version },
    metadata: {
      signature_def: {
        "@type": "type.googleapis.com/tensorflow.serving.SignatureDefMap",
        signatureDef: {
          [DEFAULT_SIGNATURE]: {
            inputs: infos(signature.inputs),
            outputs: infos(signature.outputs),
            methodName: signature.methodName,
            defaults: {},
          },
        },
      },
    },
  };
}

const sendText = (reply: FastifyReply, text: string | Buffer): FastifyReply =>
  reply.type("application/json").send(text);

/** The model version the path names, when it is served. */
function servedOrUndefined(registry: ServerContext["registry"], path: ModelPath): ServedModel | undefined {
  try {
    return registry.model(path.name, path.version);
  } catch {
    return undefined;
  }
}

/** The calls OpenVINO Model Server's metrics count per model. */
const REST_CALLS = callSites("TensorFlowServing", "REST");

export async function tfsRestRoutes(app: FastifyInstance, options: TfsRestOptions): Promise<void> {
  const { context } = options;
  const registry = context.registry;
  const apiCalls = context.apiCalls;
  const handler = createErrorHandler(TFS_HTTP_STATUS, options.bodyLimitBytes);
  app.setErrorHandler((error, request, reply) =>
    handler(error instanceof ServerError ? tfsError(error) : (error as Error), request, reply),
  );

  type Wildcard = FastifyRequest<{ Params: { "*": string } }>;

  // For the OpenAPI document: TF-Serving's paths put the model, version and verb in one
  // segment (`{m}/versions/{v}:predict`), so they are one wildcard here.
  const described = (operationId: string, summary: string) => ({ schema: { operationId, summary } });

  const everyStatus = (): string => {
    const names = [...new Set(registry.index().map((e) => e.name))];
    return JSON.stringify(
      Object.fromEntries(names.map((name) => [name, statusJson(modelStatus(registry, name))])),
    );
  };
  app.get(
    "/v1/config",
    described("tfsConfig", "Every model's status (OpenVINO Model Server)"),
    (_request, reply) => sendText(reply, everyStatus()),
  );
  // OVMS's reload on request: 201 when something changed, 200 when nothing did, with every
  // model's status either way.
  app.post(
    "/v1/config/reload",
    described("tfsConfigReload", "Reads the config files again and applies them now (OpenVINO Model Server)"),
    async (_request, reply) => {
      const reload = registry.reloadConfig;
      if (reload === undefined)
        throw new ServerError("UNSUPPORTED", "this server has no configuration to reload");
      const changed = await reload.call(registry);
      return sendText(reply.code(changed ? 201 : 200), everyStatus());
    },
  );

  app.get(
    "/v1/models/*",
    described(
      "tfsModelStatusOrMetadata",
      "TF-Serving model status ({m}[/versions/{v}]) or metadata (…/metadata)",
    ),
    (request: Wildcard, reply) => {
      const path = parseModelPath(request.params["*"]);
      if (path.action === "") {
        return recordCall(apiCalls, REST_CALLS.GetModelStatus, (identify) => {
          const status = modelStatus(registry, path.name, path.version);
          identify(path.name);
          return sendText(reply, JSON.stringify(statusJson(status)));
        });
      }
      if (path.action !== "/metadata") {
        throw new ServerError("NOT_FOUND", `Requested REST resource not found: ${request.url}`);
      }
      return recordCall(apiCalls, REST_CALLS.GetModelMetadata, (identify) => {
        const model = findModel(registry, path);
        identify(model.name, model.version);
        const metadata = registry.metadata(model.name, model.version);
        return sendText(
          reply,
          JSON.stringify(metadataJson(model.name, model.version, signatureOf(metadata, model.config))),
        );
      });
    },
  );

  app.post(
    "/v1/models/*",
    described("tfsPredict", "TF-Serving predict ({m}[/versions/{v}]:predict), row or column form"),
    async (request: Wildcard, reply) => {
      const path = parseModelPath(request.params["*"]);
      if (path.action !== ":predict") {
        const what =
          path.action === ":classify" || path.action === ":regress" ? path.action.slice(1) : undefined;
        if (what !== undefined) {
          throw new ServerError("UNSUPPORTED", `${what} is not served: seqserve models answer ':predict'`);
        }
        throw new ServerError("NOT_FOUND", `Requested REST resource not found: ${request.url}`);
      }
      return recordCall(apiCalls, REST_CALLS.Predict, (identify) =>
        restPredict(request, reply, path, identify),
      );
    },
  );

  /** A `:predict` call to the model `path` names. */
  async function restPredict(
    request: Wildcard,
    reply: FastifyReply,
    path: ModelPath,
    identify: IdentifyModel,
  ): Promise<FastifyReply> {
    // Counted for the model the path names as soon as it is found, as OVMS counts a body
    // that does not parse; findModel below still refuses what it must. (Looked up here
    // only when calls are counted: it is looked up again below.)
    if (apiCalls !== undefined) {
      const named = servedOrUndefined(registry, path);
      if (named !== undefined) identify(named.name, named.version);
    }
    const parsed = parseBody(request.body as Buffer | undefined);
    const { json, source } = parsed instanceof Promise ? await parsed : parsed;
    // signature_name is not read, as OVMS does not read it.
    const model = findModel(registry, path);
    identify(model.name, model.version);
    const hasRows = json.instances !== undefined;
    const hasColumns = json.inputs !== undefined;
    if (hasRows === hasColumns) throw ovmsInvalid("rest_order");
    // Special inputs are read (and refused) before the data, as OVMS does.
    const rows = hasRows ? decodeRows(model, json.instances, source) : undefined;
    const [id, control, step] = hasColumns
      ? columnSpecials(model, json.inputs, source)
      : [undefined, undefined, undefined];
    const routed = routedSequenceId(request.headers[SEQUENCE_ID_HEADER]);
    const sequence = sequenceOf(model, id, control, step, routed);
    const decoded = rows ?? decodeColumns(model, json.inputs, source);
    const disconnect = watchDisconnect(request, reply);
    try {
      const { response, sequenceId } = await predict({
        model,
        inputs: decoded.inputs,
        sequence,
        outputs: undefined,
        signal: disconnect.signal,
        principal: request.principal,
      });
      const parts =
        decoded.rows === undefined
          ? columnParts(scalarOutputsAsModel(model.config, response.outputs), sequenceId)
          : rowParts(scalarOutputsAsModel(model.config, response.outputs, true), decoded.rows);
      const body = writeParts(parts, jsonElements(response.outputs));
      return sendText(reply, body instanceof Promise ? await body : body);
    } finally {
      disconnect.dispose();
    }
  }
}
