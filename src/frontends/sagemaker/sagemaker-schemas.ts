import { BINARY_SCHEMA, emptyResponse, jsonContent, pathParams } from "../common/http/openapi.ts";

// The SageMaker inference-container contract and the runtime API's invocation path, as
// route schemas for the OpenAPI document (PROTOCOLS.md §4).

const SAGEMAKER_ERROR = {
  description: "An error; its AWS error type is in x-amzn-errortype",
  headers: { "x-amzn-errortype": { type: "string" } },
  ...jsonContent({
    type: "object",
    properties: {
      error: { type: "string" },
      message: { type: "string", description: "The same, as the AWS SDKs read it" },
    },
    required: ["error", "message"],
  }),
};

/** The runtime API's form of a container's error, as SageMaker makes it (error-status.ts). */
const MODEL_ERROR = {
  description:
    "ModelError (x-amzn-errortype): the container's error answer, its status in OriginalStatusCode and its body in OriginalMessage",
  headers: { "x-amzn-errortype": { type: "string" } },
  ...jsonContent({
    type: "object",
    properties: {
      ErrorCode: { type: "string", enum: ["CLIENT_ERROR_FROM_MODEL", "INTERNAL_FAILURE_FROM_MODEL"] },
      Message: { type: "string" },
      OriginalMessage: { type: "string" },
      OriginalStatusCode: { type: "integer" },
    },
    required: ["ErrorCode", "Message", "OriginalMessage", "OriginalStatusCode"],
  }),
};

const SESSION_HEADERS = {
  type: "object",
  properties: {
    "x-amzn-sagemaker-session-id": {
      type: "string",
      description: "NEW_SESSION to open a session, or the id of an open one",
    },
    "x-amzn-sagemaker-target-model": {
      type: "string",
      description: "The model (or a model.tar.gz named after it)",
    },
  },
};

/** The bodies an invocation may carry and an answer may take. */
const INVOCATION_CONTENT = {
  "application/json": {
    schema: {
      description:
        'A KServe v2 inference request (or response), a bare array of the only input (or output), or {"requestType": "NEW_SESSION" | "CLOSE"}',
    },
  },
  "application/vnd.sagemaker-triton.binary+json": { schema: BINARY_SCHEMA },
  "application/octet-stream": { schema: BINARY_SCHEMA },
};

/** The forms of an answer: an invocation's, and a decoupled model's JSON lines. */
const ANSWER_CONTENT = {
  ...INVOCATION_CONTENT,
  "application/jsonlines": {
    schema: {
      type: "string",
      description:
        "The answer of a model with several responses per request: one KServe v2 JSON response per line",
    },
  },
};

const invocation = (operationId: string, withEndpoint: boolean) => ({
  operationId,
  tags: ["sagemaker"],
  summary: withEndpoint
    ? "An inference as the AWS SDKs' InvokeEndpoint sends it (any endpoint name)"
    : "An inference, as SageMaker forwards InvokeEndpoint to the container",
  ...(withEndpoint ? { params: pathParams(["endpoint"], { endpoint: "Any endpoint name" }) } : {}),
  headers: SESSION_HEADERS,
  body: { content: INVOCATION_CONTENT },
  response: {
    200: {
      description:
        "The outputs, in the form of the request unless Accept asks for another; a session's opening and closing name it in X-Amzn-SageMaker-New-Session-Id and X-Amzn-SageMaker-Closed-Session-Id",
      headers: {
        "x-amzn-sagemaker-new-session-id": { type: "string", description: "<id>; Expires=<UTC time>" },
        "x-amzn-sagemaker-closed-session-id": { type: "string" },
      },
      content: ANSWER_CONTENT,
    },
    ...(withEndpoint ? { 424: MODEL_ERROR } : {}),
    default: SAGEMAKER_ERROR,
  },
});

const MODEL_NAME = pathParams(["name"], {
  name: "The model_name it was loaded with (POST /models): SageMaker's hash of the artifact",
});
const NOT_LOADED = emptyResponse("No model of this name was loaded through POST /models");
const MODEL_URL = {
  type: "object",
  properties: { modelName: { type: "string" }, modelUrl: { type: "string" } },
  required: ["modelName", "modelUrl"],
};

export const SAGEMAKER_SCHEMAS = {
  ping: {
    operationId: "ping",
    tags: ["sagemaker"],
    summary:
      "200 when every model is ready, or with --sagemaker-ping-mode live while the server runs (and is not stopping)",
    response: { 200: emptyResponse("Ready"), default: SAGEMAKER_ERROR },
  },
  invocations: invocation("invocations", false),
  endpointInvocations: invocation("endpointInvocations", true),
  endpointInvocationsResponseStream: {
    operationId: "endpointInvocationsResponseStream",
    tags: ["sagemaker"],
    summary:
      "An inference as the AWS SDKs' InvokeEndpointWithResponseStream sends it (any endpoint name): the answer as an AWS event stream",
    params: pathParams(["endpoint"], { endpoint: "Any endpoint name" }),
    headers: {
      type: "object",
      properties: {
        ...SESSION_HEADERS.properties,
        "x-amzn-sagemaker-session-id": {
          type: "string",
          description: "The id of an open session (sessions open with InvokeEndpoint)",
        },
        "x-amzn-sagemaker-accept": { type: "string", description: "The answer's form, as Accept" },
      },
    },
    body: { content: INVOCATION_CONTENT },
    response: {
      200: {
        description:
          "PayloadPart events: one per response of a model with several (a KServe v2 JSON line each), or one holding the answer; its type in X-Amzn-SageMaker-Content-Type",
        headers: { "x-amzn-sagemaker-content-type": { type: "string" } },
        content: { "application/vnd.amazon.eventstream": { schema: BINARY_SCHEMA } },
      },
      424: MODEL_ERROR,
      default: SAGEMAKER_ERROR,
    },
  },
  modelInvoke: {
    ...invocation("modelInvoke", false),
    summary: "A multi-model endpoint's invocation of one model, as /invocations",
    params: MODEL_NAME,
    response: { ...invocation("modelInvoke", false).response, 404: NOT_LOADED },
  },
  listModels: {
    operationId: "listModels",
    tags: ["sagemaker"],
    summary: "A multi-model endpoint's models that are ready",
    response: {
      200: jsonContent({
        type: "object",
        properties: { models: { type: "array", items: MODEL_URL } },
        required: ["models"],
      }),
    },
  },
  getModel: {
    operationId: "getModel",
    tags: ["sagemaker"],
    summary: "A multi-model endpoint's model",
    params: MODEL_NAME,
    response: { 200: jsonContent(MODEL_URL), 404: NOT_LOADED },
  },
  loadModel: {
    operationId: "loadModel",
    tags: ["sagemaker"],
    summary:
      "Loads the model folder at url as model_name, served under the X-Amzn-SageMaker-Target-Model header's name, else model_name (SageMaker's multi-model endpoint)",
    body: jsonContent({
      type: "object",
      properties: { model_name: { type: "string" }, url: { type: "string" } },
      required: ["model_name", "url"],
    }),
    response: {
      200: emptyResponse("Loaded"),
      409: {
        ...SAGEMAKER_ERROR,
        description: "A model of this model_name, or served under this name, is loaded already",
      },
      507: { ...SAGEMAKER_ERROR, description: "The load ran out of memory" },
      default: SAGEMAKER_ERROR,
    },
  },
  unloadModel: {
    operationId: "unloadModel",
    tags: ["sagemaker"],
    summary: "Unloads a multi-model endpoint's model",
    params: MODEL_NAME,
    response: { 200: emptyResponse("Unloaded"), 404: NOT_LOADED, default: SAGEMAKER_ERROR },
  },
};
