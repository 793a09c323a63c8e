import { DATATYPES } from "../../core/datatype.ts";
import { RESPONSE_STAT_KINDS } from "../../core/response-statistics.ts";
import { BINARY_SCHEMA, emptyResponse, jsonContent, pathParams } from "../common/http/openapi.ts";

// The KServe v2 / Triton HTTP API and seqserve's sequence endpoints, as route schemas for
// the OpenAPI document (PROTOCOLS.md §1). Routes registered with and without
// `/versions/{version}` get one operation each.

type JsonSchema = Record<string, unknown>;

const ERROR_BODY: JsonSchema = {
  type: "object",
  properties: { error: { type: "string", description: "What went wrong, naming the model, input or field" } },
  required: ["error"],
};

/** Any failure: the status follows Triton's table (400, 404, 413, 503, ...), the body names the problem. */
const KSERVE_ERROR = { description: "An error", ...jsonContent(ERROR_BODY) };

const PARAMETERS: JsonSchema = {
  type: "object",
  description:
    "Request or response parameters (sequence_id, sequence_start, sequence_end, binary_data_output, ...)",
  additionalProperties: { oneOf: [{ type: "boolean" }, { type: "number" }, { type: "string" }] },
};

const DATATYPE: JsonSchema = { type: "string", enum: [...DATATYPES] };

const SHAPE: JsonSchema = { type: "array", items: { type: "integer" } };

const TENSOR_METADATA: JsonSchema = {
  type: "object",
  properties: { name: { type: "string" }, datatype: DATATYPE, shape: SHAPE },
  required: ["name", "datatype", "shape"],
};

const TENSOR_DATA: JsonSchema = {
  type: "array",
  description: "Row-major elements, flat or nested; absent when the tensor travels as binary data",
};

/** An input of a request, or an output of a response. */
const TENSOR: JsonSchema = {
  type: "object",
  properties: {
    name: { type: "string" },
    shape: SHAPE,
    datatype: DATATYPE,
    parameters: PARAMETERS,
    data: TENSOR_DATA,
  },
  required: ["name", "shape", "datatype"],
};

const INFER_REQUEST: JsonSchema = {
  type: "object",
  properties: {
    id: { type: "string" },
    parameters: PARAMETERS,
    inputs: {
      type: "array",
      items: TENSOR,
    },
    outputs: {
      type: "array",
      items: {
        type: "object",
        properties: { name: { type: "string" }, parameters: PARAMETERS },
        required: ["name"],
      },
    },
  },
  required: ["inputs"],
};

const INFER_RESPONSE: JsonSchema = {
  type: "object",
  properties: {
    model_name: { type: "string" },
    model_version: { type: "string" },
    id: { type: "string" },
    parameters: PARAMETERS,
    outputs: {
      type: "array",
      items: TENSOR,
    },
  },
  required: ["model_name", "outputs"],
};

const DURATION: JsonSchema = {
  type: "object",
  properties: { count: { type: "integer" }, ns: { type: "integer" } },
  required: ["count", "ns"],
};

const LOG_SETTINGS: JsonSchema = {
  type: "object",
  properties: {
    log_file: { type: "string" },
    log_info: { type: "boolean" },
    log_warning: { type: "boolean" },
    log_error: { type: "boolean" },
    log_verbose_level: { type: "integer", minimum: 0 },
    log_format: { type: "string", enum: ["default", "ISO8601"] },
  },
};

const TRACE_SETTING_VALUE: JsonSchema = {
  oneOf: [{ type: "string" }, { type: "array", items: { type: "string" } }],
};

const TRACE_SETTINGS: JsonSchema = {
  type: "object",
  description: "Each setting's value as a string (the level as a list); in a change, null clears it",
  properties: {
    trace_level: { type: "array", items: { type: "string", enum: ["OFF", "TIMESTAMPS", "TENSORS"] } },
    trace_rate: { type: "string" },
    trace_count: { type: "string" },
    log_frequency: { type: "string" },
    trace_file: { type: "string" },
    trace_mode: { type: "string", enum: ["triton", "opentelemetry"] },
  },
  additionalProperties: TRACE_SETTING_VALUE,
};

/** The trace settings routes: the global setting, or a model's (`path` with `:model`). */
export function traceSettingsSchemas(path: string) {
  const model = path.includes(":model");
  const params = model ? { params: modelParams(path) } : {};
  const whose = model
    ? "A model's trace settings (the global ones where it sets none)"
    : "The global trace settings";
  const response = {
    200: { description: "The trace settings", ...jsonContent(TRACE_SETTINGS) },
    default: KSERVE_ERROR,
  };
  return {
    get: {
      operationId: model ? "modelTraceSettings" : "traceSettings",
      tags: ["trace"],
      summary: `${whose} (Triton's trace extension)`,
      ...params,
      response,
    },
    update: {
      operationId: model ? "modelTraceSettingsUpdate" : "traceSettingsUpdate",
      tags: ["trace"],
      summary: `Changes ${model ? "a model's" : "the global"} trace settings a request names (the file and the mode are chosen at start)`,
      ...params,
      body: jsonContent(TRACE_SETTINGS),
      response,
    },
  };
}

const SYSTEM_REGION: JsonSchema = {
  type: "object",
  properties: {
    name: { type: "string" },
    key: { type: "string", description: "The POSIX shared-memory key (`/name`, in /dev/shm)" },
    offset: { type: "integer", minimum: 0 },
    byte_size: { type: "integer", minimum: 0 },
  },
  required: ["name", "key", "offset", "byte_size"],
};

/**
 * The shared memory routes of `kind` (Triton's system and CUDA shared memory extensions):
 * every region, or (`path` with `:region`) the one named.
 */
export function sharedMemorySchemas(kind: "system" | "cuda", path: string) {
  const named = path.includes(":region");
  const params = named ? { params: pathParams(["region"], { region: "The region's name" }) } : {};
  const which = kind === "system" ? "system" : "CUDA";
  const whose = named ? `the ${which} shared memory region named` : `every ${which} shared memory region`;
  const id = (action: string): string => `${kind}SharedMemory${action}${named ? "Region" : ""}`;
  const aside =
    kind === "cuda"
      ? " (seqserve runs on the CPU: there are none)"
      : " (with API keys, the caller's own: a region belongs to the key that registered it)";
  return {
    status: {
      operationId: id("Status"),
      tags: ["shared memory"],
      summary: `The status of ${whose}${aside}`,
      ...params,
      response: {
        200: {
          description: "The regions",
          ...jsonContent({ type: "array", items: kind === "system" ? SYSTEM_REGION : { type: "object" } }),
        },
        default: KSERVE_ERROR,
      },
    },
    register: {
      operationId: id("Register"),
      tags: ["shared memory"],
      summary:
        kind === "system"
          ? "Registers a slice of a POSIX shared-memory object as a region (with --allow-client-shm=true)"
          : "Refused: seqserve runs on the CPU",
      ...params,
      body: jsonContent(
        kind === "system"
          ? {
              type: "object",
              properties: {
                key: { type: "string" },
                offset: { type: "integer", minimum: 0 },
                byte_size: { type: "integer", minimum: 0 },
              },
              required: ["key", "byte_size"],
            }
          : { type: "object" },
      ),
      response: { 200: emptyResponse("Registered"), default: KSERVE_ERROR },
    },
    unregister: {
      operationId: id("Unregister"),
      tags: ["shared memory"],
      summary: `Unregisters ${whose}${aside}`,
      ...params,
      response: { 200: emptyResponse("Unregistered"), default: KSERVE_ERROR },
    },
  };
}

const MODEL_STATISTICS: JsonSchema = {
  type: "object",
  properties: {
    model_stats: {
      type: "array",
      items: {
        type: "object",
        properties: {
          name: { type: "string" },
          version: { type: "string" },
          last_inference: { type: "integer" },
          inference_count: { type: "integer" },
          execution_count: { type: "integer" },
          inference_stats: {
            type: "object",
            properties: Object.fromEntries(
              [
                "success",
                "fail",
                "queue",
                "compute_input",
                "compute_infer",
                "compute_output",
                "cache_hit",
                "cache_miss",
              ].map((k) => [k, DURATION]),
            ),
          },
          batch_stats: {
            type: "array",
            items: {
              type: "object",
              properties: {
                batch_size: { type: "integer" },
                compute_input: DURATION,
                compute_infer: DURATION,
                compute_output: DURATION,
              },
            },
          },
          response_stats: {
            type: "object",
            description:
              'Decoupled models: their responses by index within the request ("0" each request\'s first); empty for other models',
            additionalProperties: {
              type: "object",
              properties: Object.fromEntries(RESPONSE_STAT_KINDS.map((k) => [k, DURATION])),
            },
          },
          memory_usage: { type: "array", items: { type: "object" }, description: "Not measured: empty" },
        },
        required: ["name", "version", "inference_count", "execution_count", "inference_stats", "batch_stats"],
      },
    },
  },
  required: ["model_stats"],
};

const SEQUENCE_ID: JsonSchema = {
  oneOf: [{ type: "integer", minimum: 0 }, { type: "string" }],
  description: "A uint64 (its exact digits, also above 2^53) or a string; id_type says which",
};

const SEQUENCES: JsonSchema = {
  type: "object",
  properties: {
    sequences: {
      type: "array",
      items: {
        type: "object",
        properties: {
          id: SEQUENCE_ID,
          id_type: { type: "string", enum: ["uint64", "string"] },
          status: { type: "string", enum: ["active", "backlogged", "ending"] },
          age_ms: { type: "number" },
          idle_ms: { type: "number" },
          steps: { type: "integer" },
          queued: { type: "integer" },
          state_bytes: { type: "integer" },
          instance: { type: "string", nullable: true },
          slot: { type: "integer", nullable: true },
          expires_at: { type: "string", format: "date-time", nullable: true },
        },
        required: ["id", "id_type", "status", "steps", "state_bytes"],
      },
    },
    summary: {
      type: "object",
      properties: {
        live: { type: "integer" },
        backlog: { type: "integer" },
        state_bytes: { type: "integer" },
        state_allocated_bytes: { type: "integer" },
        ended: { type: "object", additionalProperties: { type: "integer" } },
      },
      required: ["live", "backlog", "state_bytes", "ended"],
    },
  },
  required: ["sequences", "summary"],
};

const PATH_DESCRIPTIONS = {
  repository:
    "A repository's name, as Triton's paths may give one: the index ignores it, a load or unload is refused",
  model: "The model's name",
  version: "A version number; absent: the highest ready version",
  id: "A sequence id: decimal digits are a uint64, anything else a string",
};

/** A model path's parameters, with or without `/versions/{version}`. */
function modelParams(path: string, extra: readonly string[] = []): JsonSchema {
  const names = [...(path.includes(":version") ? ["model", "version"] : ["model"]), ...extra];
  return pathParams(names, PATH_DESCRIPTIONS);
}

/** The operation id of a model route: `name`, or `nameVersion` on the path with a version. */
export const operationId = (name: string, path: string): string =>
  path.includes(":version") ? `${name}Version` : name;

const REPOSITORY_INDEX = {
  type: "array",
  items: {
    type: "object",
    properties: {
      name: { type: "string" },
      version: { type: "string" },
      state: { type: "string", enum: ["READY", "UNAVAILABLE", "LOADING", "UNLOADING"] },
      reason: { type: "string" },
    },
    required: ["name"],
  },
};

/** A load or unload that names a repository: refused, as Triton refuses it. */
export function namedRepositoryControlSchema(action: "load" | "unload") {
  return {
    operationId: action === "load" ? "namedRepositoryModelLoad" : "namedRepositoryModelUnload",
    tags: ["repository"],
    summary: `Refused (501): Triton ${action}s no model in a named repository`,
    params: pathParams(["repository", "model"], PATH_DESCRIPTIONS),
    response: { default: KSERVE_ERROR },
  };
}

export const SERVER_SCHEMAS = {
  metadata: {
    operationId: "serverMetadata",
    tags: ["server"],
    summary: "The server's name, version and extensions",
    response: {
      200: {
        description: "Server metadata",
        ...jsonContent({
          type: "object",
          properties: {
            name: { type: "string" },
            version: { type: "string" },
            extensions: { type: "array", items: { type: "string" } },
          },
          required: ["name", "version", "extensions"],
        }),
      },
      default: KSERVE_ERROR,
    },
  },
  live: {
    operationId: "serverLive",
    tags: ["health"],
    summary: "Whether the server is live",
    response: { 200: emptyResponse("Live"), default: KSERVE_ERROR },
  },
  ready: {
    operationId: "serverReady",
    tags: ["health"],
    summary: "Whether the server is ready: every model ready (unless --strict-readiness=false)",
    response: { 200: emptyResponse("Ready"), default: KSERVE_ERROR },
  },
  statistics: {
    operationId: "modelStatisticsAll",
    tags: ["statistics"],
    summary: "Inference statistics of every model",
    response: { 200: { description: "Statistics", ...jsonContent(MODEL_STATISTICS) }, default: KSERVE_ERROR },
  },
  logSettings: {
    operationId: "logSettings",
    tags: ["logging"],
    summary: "The log settings (Triton's logging extension)",
    response: {
      200: { description: "The log settings", ...jsonContent(LOG_SETTINGS) },
      default: KSERVE_ERROR,
    },
  },
  logSettingsUpdate: {
    operationId: "logSettingsUpdate",
    tags: ["logging"],
    summary: "Changes the log settings a request names (the file and the format are chosen at start)",
    body: jsonContent(LOG_SETTINGS),
    response: {
      200: { description: "The log settings", ...jsonContent(LOG_SETTINGS) },
      default: KSERVE_ERROR,
    },
  },
  repositoryIndex: {
    operationId: "repositoryIndex",
    tags: ["repository"],
    summary: "The models in the repositories and their states",
    body: jsonContent({ type: "object", properties: { ready: { type: "boolean" } } }),
    response: {
      200: {
        description: "The index",
        ...jsonContent(REPOSITORY_INDEX),
      },
      default: KSERVE_ERROR,
    },
  },
  namedRepositoryIndex: {
    operationId: "namedRepositoryIndex",
    tags: ["repository"],
    summary: "The index, as at /v2/repository/index: the repository's name is ignored, as in Triton",
    params: pathParams(["repository"], PATH_DESCRIPTIONS),
    body: jsonContent({ type: "object", properties: { ready: { type: "boolean" } } }),
    response: { 200: { description: "The index", ...jsonContent(REPOSITORY_INDEX) }, default: KSERVE_ERROR },
  },
  repositoryLoad: {
    operationId: "repositoryModelLoad",
    tags: ["repository"],
    summary: "Loads (or reloads) a model; explicit model control only",
    params: pathParams(["model"], PATH_DESCRIPTIONS),
    body: jsonContent({
      type: "object",
      properties: {
        parameters: {
          type: "object",
          properties: { config: { type: "string", description: "A model config in Triton's JSON form" } },
          patternProperties: {
            "^file:": {
              type: "string",
              format: "byte",
              description:
                "A file of the model's folder, `file:<version>/<name>`, base64: the sent files are loaded in place of the repository's folder (with `config`)",
            },
          },
        },
      },
    }),
    response: { 200: emptyResponse("Loaded"), default: KSERVE_ERROR },
  },
  repositoryUnload: {
    operationId: "repositoryModelUnload",
    tags: ["repository"],
    summary: "Unloads a model; explicit model control only",
    params: pathParams(["model"], PATH_DESCRIPTIONS),
    body: jsonContent({
      type: "object",
      properties: { parameters: { type: "object", properties: { unload_dependents: { type: "boolean" } } } },
    }),
    response: { 200: emptyResponse("Unloaded"), default: KSERVE_ERROR },
  },
};

/** The schemas of the routes under a model path (`/v2/models/:model[/versions/:version]`). */
export function modelSchemas(path: string) {
  const params = modelParams(path);
  return {
    metadata: {
      operationId: operationId("modelMetadata", path),
      tags: ["models"],
      summary: "A model's inputs, outputs, versions and platform",
      params,
      response: {
        200: {
          description: "Model metadata",
          ...jsonContent({
            type: "object",
            properties: {
              name: { type: "string" },
              versions: { type: "array", items: { type: "string" } },
              platform: { type: "string" },
              inputs: { type: "array", items: TENSOR_METADATA },
              outputs: { type: "array", items: TENSOR_METADATA },
            },
            required: ["name", "versions", "platform", "inputs", "outputs"],
          }),
        },
        default: KSERVE_ERROR,
      },
    },
    ready: {
      operationId: operationId("modelReady", path),
      tags: ["health"],
      summary: "Whether a model (version) is ready",
      params,
      response: { 200: emptyResponse("Ready"), default: KSERVE_ERROR },
    },
    config: {
      operationId: operationId("modelConfig", path),
      tags: ["models"],
      summary: "A model's completed configuration, in Triton's JSON form",
      params,
      response: {
        200: {
          description: "The model config",
          ...jsonContent({ type: "object", additionalProperties: true }),
        },
        default: KSERVE_ERROR,
      },
    },
    statistics: {
      operationId: operationId("modelStatistics", path),
      tags: ["statistics"],
      summary: "A model's inference statistics",
      params,
      response: {
        200: { description: "Statistics", ...jsonContent(MODEL_STATISTICS) },
        default: KSERVE_ERROR,
      },
    },
    infer: {
      operationId: operationId("modelInfer", path),
      tags: ["inference"],
      summary: "An inference; with sequence parameters, a step of a sequence",
      description:
        "A JSON body, or the binary tensor extension: the JSON header's length in Inference-Header-Content-Length, " +
        "raw little-endian tensors after it (0: the body is the raw bytes of the model's only input). Bodies may " +
        "be gzip or deflate compressed (Content-Encoding).",
      params,
      body: {
        content: {
          "application/json": { schema: INFER_REQUEST },
          "application/octet-stream": { schema: BINARY_SCHEMA },
        },
      },
      response: {
        200: {
          description:
            "The outputs: JSON, or the binary tensor extension (header length in Inference-Header-Content-Length)",
          content: {
            "application/json": { schema: INFER_RESPONSE },
            "application/octet-stream": { schema: BINARY_SCHEMA },
          },
        },
        default: KSERVE_ERROR,
      },
    },
    sequences: {
      operationId: operationId("modelSequences", path),
      tags: ["sequences"],
      summary: "A sequence model's live and backlogged sequences, with a summary",
      params,
      response: { 200: { description: "The sequences", ...jsonContent(SEQUENCES) }, default: KSERVE_ERROR },
    },
    endSequence: {
      operationId: operationId("modelSequenceEnd", path),
      tags: ["sequences"],
      summary: "Ends a sequence now and frees its state",
      params: modelParams(path, ["id"]),
      querystring: {
        type: "object",
        properties: {
          id_type: {
            type: "string",
            enum: ["uint64", "string"],
            description: "How to read the id in the path",
          },
        },
      },
      response: { 200: emptyResponse("Ended"), default: KSERVE_ERROR },
    },
    stream: {
      operationId: operationId("modelStream", path),
      tags: ["sequences"],
      summary: "Upgrades to a WebSocket carrying one sequence (see the README for its messages)",
      params,
      querystring: {
        type: "object",
        properties: {
          sequence_id: { type: "string" },
          id_type: { type: "string", enum: ["string"] },
          format: { type: "string", enum: ["framed", "raw"] },
          binary_data_output: { type: "boolean" },
        },
      },
      response: {
        101: emptyResponse("Switching to the WebSocket protocol"),
        default: KSERVE_ERROR,
      },
    },
  };
}
