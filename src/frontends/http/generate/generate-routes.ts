import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import { asServerError, type ServerError } from "../../../core/errors.ts";
import type { ServedModel, ServerContext } from "../../../core/model.ts";
import { inferStream, type StreamedInferResponse } from "../../../core/response-stream.ts";
import { watchDisconnect } from "../../common/http/client-disconnect.ts";
import { createErrorHandler } from "../../common/http/error-reply.ts";
import { readJsonBody } from "../../common/http/json-body.ts";
import { sendJsonText } from "../../common/http/json-text.ts";
import { OPTIONAL_BODY } from "../../common/http/openapi.ts";
import { writeFailedStream, writeStreamedReply } from "../../common/http/streamed-reply.ts";
import { KSERVE_HTTP_STATUS } from "../../common/kserve/error-status.ts";
import { modelVersion } from "../../common/kserve/model-version.ts";
import type { ResponseBudgets } from "../../common/response-budget.ts";
import { routedSequenceId, SEQUENCE_ID_HEADER, withRoutedSequenceId } from "../../common/sequence-routing.ts";
import { MODEL_PATHS, type ModelParams } from "../kserve-routes.ts";
import { operationId } from "../kserve-schemas.ts";
import { decodeGenerateRequest, encodeGenerateResponse } from "./generate-codec.ts";

// Triton's generate extension: `/generate` answers one JSON object; `/generate_stream`
// answers Server-Sent Events, one `data:` event per response, as a decoupled model
// produces them. The status comes with the first response: a request refused before its
// model had it gets a JSON error with its status; one the model failed before its first
// response gets the failure's status and only its `{"error"}` event; a failure after the
// first response is an `{"error"}` event.
// Slow readers are waited for (the next event is written once the socket drains, and the
// model's sending waits with it), for at most the stream idle time; a client that leaves,
// or takes nothing for that long, cancels the request, and the model is told.

export interface GenerateRoutesOptions {
  readonly context: ServerContext;
  readonly bodyLimitBytes: number;
  /** Per-connection budgets of answers waiting for slow readers. */
  readonly budgets?: ResponseBudgets;
  /** A client that takes no event for this long is let go (the stream idle timeout); default: never. */
  readonly idleTimeoutMs?: number;
}

type GenerateRequest = FastifyRequest<{ Params: ModelParams; Body: Record<string, unknown> }>;

/** An input or output member: one value, or a flat list of them, of any datatype. */
const SCALAR = { anyOf: [{ type: "string" }, { type: "number" }, { type: "boolean" }] } as const;
const TENSOR_MEMBER = { anyOf: [...SCALAR.anyOf, { type: "array", items: SCALAR }] } as const;

/** The request body (documented for OpenAPI; read as JSON before validation). */
const GENERATE_BODY = {
  type: "object",
  properties: {
    id: { type: "string" },
    text_input: TENSOR_MEMBER,
    parameters: { type: "object", additionalProperties: true },
  },
  additionalProperties: true,
} as const;

const GENERATE_RESPONSE = {
  type: "object",
  properties: {
    id: { type: "string" },
    model_name: { type: "string" },
    model_version: { type: "string" },
    text_output: TENSOR_MEMBER,
  },
  required: ["model_name", "model_version"],
  additionalProperties: true,
} as const;

const ERROR_RESPONSE = {
  type: "object",
  properties: { error: { type: "string" } },
  required: ["error"],
} as const;

// An empty body is an empty request (a model whose inputs are all optional answers it).
const SCHEMA = {
  [OPTIONAL_BODY]: true,
  body: GENERATE_BODY,
  response: { 200: GENERATE_RESPONSE, "4xx": ERROR_RESPONSE, "5xx": ERROR_RESPONSE },
};

const STREAM_SCHEMA = {
  [OPTIONAL_BODY]: true,
  body: GENERATE_BODY,
  response: {
    200: {
      description: "Server-Sent Events: one `data: <generate response object>` event per response",
      content: { "text/event-stream": { schema: { type: "string" } } },
    },
    "4xx": ERROR_RESPONSE,
    "5xx": ERROR_RESPONSE,
  },
};

/**
 * The bodies' bytes, kept past parsing: integers past 2^53 (64-bit inputs, sequence ids)
 * are read again from their digits, which JSON.parse rounds.
 */
const bodyBytes = new WeakMap<FastifyRequest, Buffer>();

/** The body arrives as bytes (every route reads them raw): parsed here so the schema can check it. */
async function parseBody(request: FastifyRequest): Promise<void> {
  const bytes = request.body as Buffer | undefined;
  if (bytes !== undefined) bodyBytes.set(request, bytes);
  request.body = readJsonBody(bytes) ?? {};
}

/** A generate request's body: its JSON object, and its text (for the digits of long numbers). */
export interface GenerateBody {
  readonly json: Record<string, unknown>;
  readonly text: () => string;
}

/** The bytes' text, decoded once and only if a number needs its digits. */
function lazyText(bytes: Buffer | undefined): () => string {
  let text: string | undefined;
  return () => {
    text ??= bytes?.toString("utf8") ?? "";
    return text;
  };
}

/** A generate body from its bytes (an empty body is an empty request). */
export function readGenerateBody(bytes: Buffer | undefined): GenerateBody {
  return { json: readJsonBody(bytes) ?? {}, text: lazyText(bytes) };
}

function parsedBody(request: GenerateRequest): GenerateBody {
  return { json: request.body, text: lazyText(bodyBytes.get(request)) };
}

const sse = (json: string): string => `data: ${json}\n\n`;

/** How a streamed answer waits for a slow reader. */
export interface GenerateDelivery {
  readonly budgets?: ResponseBudgets | undefined;
  readonly idleTimeoutMs?: number | undefined;
  /**
   * The answer goes as the parts of another stream (SageMaker's response stream, an AWS
   * event stream): `one` sends the one answer, `frame` wraps each event's text, `headers`
   * are the stream's. Undefined: the answer as the generate extension sends it.
   */
  readonly parts?: {
    readonly one: (reply: FastifyReply, type: string, body: Uint8Array) => FastifyReply;
    readonly frame: (text: string) => Uint8Array;
    readonly headers: Readonly<Record<string, string>>;
  };
  /**
   * A stream the model failed before its first response is thrown to the route's error
   * handler, as a refusal is (SageMaker's runtime API, which makes a container's error
   * status a ModelError). Otherwise it is answered as Triton's generate_stream answers
   * it: the failure's status, and its `{"error"}` event.
   */
  readonly failedStreamAsError?: boolean;
}

const JSON_TYPE = "application/json";
const EVENT_STREAM_HEADERS = {
  "content-type": "text/event-stream; charset=utf-8",
  "cache-control": "no-cache",
};

/**
 * /generate's answer to a request that did not end with exactly one response (none, a
 * flag-only final; several; one and a failure), with the first response's status, 200
 * unless that failed: Triton's words, in the body only.
 */
const NOT_ONE_RESPONSE = JSON.stringify({
  error:
    "generate expects model to produce exactly 1 response, use generate stream for model that generates various number of responses",
});

/**
 * Takes `responses` to the request's end; whether nothing came (no response, no failure:
 * a failure is a response of its own in Triton's count).
 */
async function nothingFollows(responses: AsyncIterator<StreamedInferResponse>): Promise<boolean> {
  let more = false;
  try {
    while ((await responses.next()).done !== true) more = true;
  } catch {
    return false;
  }
  return !more;
}

/**
 * Answers `body` as Triton's generate extension does, for `model`: one JSON object, or
 * (`streaming`) Server-Sent Events. Refusals are thrown to the route's error handler, which
 * answers them in its protocol's form (KServe here; SageMaker's for its invocations), and
 * so are /generate's failures; a stream its model failed is answered here.
 */
export async function answerGenerate(
  model: ServedModel,
  body: GenerateBody,
  streaming: boolean,
  request: FastifyRequest,
  reply: FastifyReply,
  delivery: GenerateDelivery,
): Promise<FastifyReply | undefined> {
  const disconnect = watchDisconnect(request, reply);
  try {
    const routed = routedSequenceId(request.headers[SEQUENCE_ID_HEADER]);
    const stream = inferStream(
      model,
      withRoutedSequenceId(
        decodeGenerateRequest(body.json, model, disconnect.signal, request.principal, body.text),
        routed,
        model,
      ),
    );
    const responses = stream[Symbol.asyncIterator]();
    const parts = delivery.parts;
    const event = (text: string): string | Uint8Array =>
      parts === undefined ? sse(text) : parts.frame(sse(text));
    const failureEvent = (error: ServerError) => event(JSON.stringify({ error: error.message }));
    const streamHeaders = parts?.headers ?? EVENT_STREAM_HEADERS;
    let first: IteratorResult<StreamedInferResponse>;
    try {
      first = await responses.next();
    } catch (error) {
      // Refused before the model had it (a check, an unknown model, a sequence's admission:
      // Triton's TRITONSERVER_ServerInferAsync errors), or /generate's one answer: the
      // route's error answer. A stream the model failed is that failure's event.
      if (!streaming || !stream.dispatched || delivery.failedStreamAsError === true) throw error;
      const failure = asServerError(error);
      writeFailedStream(reply, KSERVE_HTTP_STATUS[failure.code], streamHeaders, failureEvent(failure));
      return undefined;
    }
    if (!streaming) {
      // As Triton, the answer waits for the request's end; the status is the first
      // response's (a failure is a response there). A sequence's step is not cancelled
      // halfway, which would end the sequence: what else it sends is let go.
      const answer =
        first.done !== true && (await nothingFollows(responses))
          ? encodeGenerateResponse(first.value)
          : NOT_ONE_RESPONSE;
      return parts === undefined
        ? sendJsonText(reply, answer)
        : parts.one(reply, JSON_TYPE, Buffer.from(answer, "utf8"));
    }
    await writeStreamedReply(reply, {
      headers: streamHeaders,
      first: first.done === true ? undefined : first.value,
      rest: responses,
      frame: (response) => event(encodeGenerateResponse(response)),
      failure: failureEvent,
      budgets: delivery.budgets,
      idleTimeoutMs: delivery.idleTimeoutMs,
    });
    return undefined;
  } finally {
    disconnect.dispose();
  }
}

export async function generateRoutes(app: FastifyInstance, options: GenerateRoutesOptions): Promise<void> {
  const { context, budgets } = options;
  app.setErrorHandler(createErrorHandler(KSERVE_HTTP_STATUS, options.bodyLimitBytes));
  const delivery: GenerateDelivery = { budgets, idleTimeoutMs: options.idleTimeoutMs };
  const generate = (request: GenerateRequest, reply: FastifyReply, streaming: boolean) => {
    const { model, version } = request.params;
    return answerGenerate(
      context.registry.model(model, modelVersion(version)),
      parsedBody(request),
      streaming,
      request,
      reply,
      delivery,
    );
  };
  for (const path of MODEL_PATHS) {
    app.post(
      `${path}/generate`,
      { schema: { ...SCHEMA, operationId: operationId("modelGenerate", path) }, preValidation: parseBody },
      (request: GenerateRequest, reply) => generate(request, reply, false),
    );
    app.post(
      `${path}/generate_stream`,
      {
        schema: { ...STREAM_SCHEMA, operationId: operationId("modelGenerateStream", path) },
        preValidation: parseBody,
      },
      (request: GenerateRequest, reply) => generate(request, reply, true),
    );
  }
}
