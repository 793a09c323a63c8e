import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import type { SageMakerPingMode } from "../../config/server-options.ts";
import { asServerError, invalidArg, SERVER_EXITING, ServerError } from "../../core/errors.ts";
import type { InferRequest } from "../../core/infer.ts";
import type {
  ModelRegistry,
  SequenceEndReason,
  ServedModel,
  ServerContext,
  TensorMetadata,
} from "../../core/model.ts";
import { validateRequest } from "../../core/request-validation.ts";
import { parseSequenceStep } from "../../core/sequence/sequence-parameters.ts";
import { watchDisconnect } from "../common/http/client-disconnect.ts";
import { HttpError } from "../common/http/http-error.ts";
import { isJsonObject } from "../common/http/json-body.ts";
import { sendJson } from "../common/http/json-text.ts";
import type { OutputEncoding } from "../common/kserve/infer-request-decoder.ts";
import type { ResponseBudgets } from "../common/response-budget.ts";
import { withTraceContext } from "../common/trace-context.ts";
import {
  isOutOfMemory,
  SAGEMAKER_HTTP_ANSWERS,
  SAGEMAKER_HTTP_STATUS,
  sageMakerCoded,
} from "./error-status.ts";
import { answerGenerateInvocation, type InferenceType } from "./generate-invocation.ts";
import {
  decodeInvocation,
  type InvocationBody,
  type RequestType,
  readInvocationBody,
} from "./invocation-body.ts";
import { type AnswerForm, checkJsonLinesAnswer, chooseAnswer, sendAnswer } from "./invocation-response.ts";
import type { MultiModelEndpoint } from "./multi-model-endpoint.ts";
import { SAGEMAKER_SCHEMAS } from "./sagemaker-schemas.ts";
import { checkSessionId, formatExpiry, NEW_SESSION, newSessionHeaderValue } from "./session-id.ts";
import { type SageMakerSessions, SESSION_SLOT_WAIT_SECS } from "./sessions.ts";
import { type Delivery, deliverStreamed, type Started, sendOnePart, start } from "./streamed-answer.ts";
import { invokedModel, targetModel } from "./target-model.ts";

// The SageMaker inference-container contract (PROTOCOLS.md §4):
//
//   GET  /ping                            200 when every model is ready (ping mode live:
//                                         while the server runs), else 503
//   POST /invocations                     an inference, as SageMaker forwards it
//   POST /endpoints/{name}/invocations    the same, as the AWS SDKs' InvokeEndpoint sends
//                                         it, so they can call seqserve directly (the
//                                         endpoint name and the signature are not checked)
//   POST /endpoints/{name}/invocations-response-stream
//                                         the same as InvokeEndpointWithResponseStream
//                                         sends it: the answer as an AWS event stream
//                                         (streamed-answer.ts)
//
// Sessions: `X-Amzn-SageMaker-Session-Id: NEW_SESSION` or `"requestType": "NEW_SESSION"`
// opens one (inputs in that body run as its first step) and answers its id in
// X-Amzn-SageMaker-New-Session-Id (and X-Amzn-SageMaker-Session-Id) as
// `<id>; Expires=<UTC time>`; the id in X-Amzn-SageMaker-Session-Id continues it;
// `"requestType": "CLOSE"` with the id closes it (inputs run as its last step) and answers
// X-Amzn-SageMaker-Closed-Session-Id. Without a session, a request is a plain inference
// (KServe sequence parameters in a KServe body still work, as in Triton's SageMaker mode).

export interface InvocationRoutesOptions {
  readonly context: ServerContext;
  readonly sessions: SageMakerSessions;
  /** The model for requests that name none (--sagemaker-model). */
  readonly defaultModel: string | undefined;
  /** What /invocations (and the runtime API's /invocations) is; default infer. */
  readonly inferenceType?: InferenceType | undefined;
  /** ready: /ping is 200 while every model is ready; live: while the server runs. */
  readonly pingMode?: SageMakerPingMode | undefined;
  /** The models a multi-model endpoint loaded (POST /models), which /models/{hash}/invoke invokes. */
  readonly models: MultiModelEndpoint;
  /** Per-connection budgets of answers waiting for slow readers (streamed answers). */
  readonly budgets?: ResponseBudgets | undefined;
  /** A streamed answer's client that takes nothing for this long is let go; default: never. */
  readonly idleTimeoutMs?: number | undefined;
}

const SESSION_ID = "x-amzn-sagemaker-session-id";
/** InvokeEndpointWithResponseStream's Accept. */
const STREAM_ACCEPT = "x-amzn-sagemaker-accept";
const TARGET_MODEL = "x-amzn-sagemaker-target-model";
/** The SDKs' InferenceComponentName: the model, for a request without TargetModel (the response stream has none). */
const INFERENCE_COMPONENT = "x-amzn-sagemaker-inference-component";
const TARGET_VARIANT = "x-amzn-sagemaker-target-variant";
/** The SDKs' InvokedProductionVariant, which SageMaker's runtime API always answers. */
const INVOKED_VARIANT_HEADER = "x-Amzn-Invoked-Production-Variant";
/** The variant name SageMaker's SDKs give a model deployed without naming one. */
const DEFAULT_VARIANT = "AllTraffic";
const CUSTOM_ATTRIBUTES = "x-amzn-sagemaker-custom-attributes";
/** Response headers, spelled as SageMaker's documentation spells them. */
const NEW_SESSION_ID_HEADER = "X-Amzn-SageMaker-New-Session-Id";
const SESSION_ID_HEADER = "X-Amzn-SageMaker-Session-Id";
const CLOSED_SESSION_ID_HEADER = "X-Amzn-SageMaker-Closed-Session-Id";

const EMPTY_BODY = Buffer.alloc(0);

type SessionIntent =
  | { readonly kind: "none" }
  | { readonly kind: "open" }
  | { readonly kind: "continue"; readonly id: string }
  | { readonly kind: "close"; readonly id: string };

function headerValue(request: FastifyRequest, name: string): string | undefined {
  const value = request.headers[name];
  return Array.isArray(value) ? value.join(",") : value;
}

/** What the session header and the body's requestType ask for (either signal opens). */
function sessionIntent(header: string | undefined, requestType: RequestType | undefined): SessionIntent {
  const given = header === undefined || header === "" ? undefined : header;
  if (requestType === "CLOSE") {
    if (given === undefined || given === NEW_SESSION) {
      throw invalidArg(
        `"requestType": "CLOSE" needs the id of the session to close in X-Amzn-SageMaker-Session-Id${given === undefined ? "" : `, not ${NEW_SESSION}`}`,
      );
    }
    return { kind: "close", id: checkSessionId(given) };
  }
  // As AWS's session handler: a NEW_SESSION body opens a session whatever the header says.
  if (given === NEW_SESSION || requestType === "NEW_SESSION") return { kind: "open" };
  return given === undefined ? { kind: "none" } : { kind: "continue", id: checkSessionId(given) };
}

/** The outputs an answer will carry: those the KServe body asks for, else all of the model's. */
function returnedOutputs(body: InvocationBody, model: ServedModel): readonly TensorMetadata[] {
  const asked = body.json?.object.outputs;
  if (!Array.isArray(asked) || asked.length === 0) return model.outputs;
  const names = new Set(asked.map((o) => (isJsonObject(o) ? o.name : undefined)));
  return model.outputs.filter((o) => names.has(o.name));
}

interface Step {
  readonly request: InferRequest;
  readonly encoding: OutputEncoding;
  readonly answer: AnswerForm;
}

/**
 * Decodes the body for `model`, choosing the answer's form first (before anything runs);
 * the caller's trace context goes with the request.
 */
function prepareStep(
  body: InvocationBody,
  model: ServedModel,
  http: FastifyRequest,
  accept: string | undefined,
  signal: AbortSignal,
  principal: string | undefined,
): Step {
  const outputs = returnedOutputs(body, model);
  let answer: AnswerForm = "json";
  if (model.decoupled === true) checkJsonLinesAnswer(accept, outputs);
  else answer = chooseAnswer(accept, body.form, outputs);
  const decoded = decodeInvocation(body, model, {
    signal,
    binaryOutput: answer === "binary" || answer === "raw",
    principal,
  });
  const { traceparent, tracestate } = http.headers;
  return {
    request: withTraceContext(decoded.request, traceparent, tracestate),
    encoding: decoded.encoding,
    answer,
  };
}

function refuseSequenceFields(request: InferRequest): void {
  const sequence = request.sequence;
  // sequence_step alone is welcome: the step's place in the session, for exactly-once retries.
  const stepOnly =
    sequence !== undefined &&
    sequence.id === undefined &&
    !sequence.start &&
    !sequence.end &&
    sequence.timeoutUs === undefined &&
    !("sequence_start" in request.parameters || "sequence_end" in request.parameters);
  if (sequence === undefined || stepOnly) return;
  throw invalidArg(
    "a session request must not carry sequence parameters (sequence_id, sequence_start, sequence_end, timeout): the session is its sequence",
  );
}

/**
 * The step's place in its session for exactly-once retries: `sequence_step=N` among the
 * custom attributes (X-Amzn-SageMaker-Custom-Attributes, which SageMaker passes to the
 * container as the SDKs' CustomAttributes), or the KServe body's `sequence_step`.
 */
function sessionStep(request: InferRequest, attributes: string | undefined): number | undefined {
  const match = attributes === undefined ? null : /(?:^|[,;]\s*)sequence_step=([^,;\s]*)/.exec(attributes);
  if (match === null) return request.sequence?.step;
  return parseSequenceStep(/^\d+$/.test(match[1]!) ? Number(match[1]) : match[1]!);
}

/** `request` as a step of session `id`: a request of the session's sequence. */
function inSession(request: InferRequest, id: string, end: boolean, step: number | undefined): InferRequest {
  return {
    ...request,
    sequence: {
      id,
      start: false,
      end,
      timeoutUs: SESSION_SLOT_WAIT_SECS * 1_000_000,
      // A session lives until closed or expired: a step its client gave up on (the SDK's
      // read timeout, which it then retries) does not end it.
      keepOnCancel: true,
      ...(step === undefined ? {} : { step }),
    },
  };
}

/** Why session `id` of `model` has ended (by this replica's knowledge, or its tier's); undefined while it lives. */
async function endReason(model: ServedModel, id: string): Promise<SequenceEndReason | undefined> {
  const sequences = model.sequences;
  if (sequences === undefined) return undefined;
  const found = await (sequences.locate?.(id) ?? sequences.lookup(id));
  return found.kind === "ended" ? found.reason : undefined;
}

/**
 * What a session's failed step answers, given why the session has ended (if it has): when
 * it ended while the step waited (it expired, or got no slot in time), the sessions' words
 * for it, as any later request hears them; else the step's own error.
 */
async function sessionEndError(
  sessions: SageMakerSessions,
  model: ServedModel,
  id: string,
  ended: SequenceEndReason | undefined,
  error: unknown,
): Promise<unknown> {
  if (ended !== "expired" && ended !== "backlog_timeout") return error;
  return sessions.find(id, model).then(
    () => error,
    (told: unknown) => told,
  );
}

const cannotOpenOnStream = (): Error =>
  invalidArg(
    `InvokeEndpointWithResponseStream cannot open a session, as in SageMaker: open it with InvokeEndpoint (SessionId ${NEW_SESSION}), then stream its steps with the id it answers`,
  );

function describeReadiness(registry: ModelRegistry): string {
  const waiting = registry
    .index()
    .filter((entry) => entry.state !== "READY")
    .map(
      (entry) =>
        `'${entry.name}' is ${entry.state ?? "not loaded"}${entry.reason ? ` (${entry.reason})` : ""}`,
    );
  return waiting.length === 0 ? "the server is not ready" : `the server is not ready: ${waiting.join(", ")}`;
}

export async function invocationRoutes(
  app: FastifyInstance,
  options: InvocationRoutesOptions,
): Promise<void> {
  const { context, sessions, defaultModel, budgets, idleTimeoutMs } = options;
  const inferenceType = options.inferenceType ?? "infer";
  const registry = context.registry;

  app.get("/ping", { schema: SAGEMAKER_SCHEMAS.ping }, (_request, reply) => {
    if (context.isExiting?.() === true)
      throw new HttpError(SAGEMAKER_HTTP_STATUS.UNAVAILABLE, SERVER_EXITING);
    if (options.pingMode === "live" ? context.isLive() : context.isReady()) return reply.code(200).send();
    throw new HttpError(SAGEMAKER_HTTP_ANSWERS.notReady, describeReadiness(registry));
  });

  /**
   * `runtime`: called on the runtime API's path, as the SDKs call SageMaker (not as
   * SageMaker calls a container); `loaded`: the name a multi-model endpoint's model is
   * served under, found by the hash the path names (whatever TargetModel the request says).
   */
  const invoke = async (
    delivery: Delivery,
    runtime: boolean,
    request: FastifyRequest,
    reply: FastifyReply,
    loaded?: string,
  ): Promise<FastifyReply | undefined> => {
    if (runtime)
      reply.header(INVOKED_VARIANT_HEADER, headerValue(request, TARGET_VARIANT) || DEFAULT_VARIANT);
    if (inferenceType !== "infer" && loaded === undefined) {
      const target = targetModel(
        registry,
        headerValue(request, TARGET_MODEL) || headerValue(request, INFERENCE_COMPONENT),
      );
      const model = invokedModel(registry, target, defaultModel);
      return answerGenerateInvocation(
        inferenceType,
        model,
        request,
        reply,
        { budgets, idleTimeoutMs },
        delivery === "response-stream",
      );
    }
    const read = readInvocationBody(
      (request.body as Buffer | undefined) ?? EMPTY_BODY,
      request.headers["content-type"],
    );
    const body = read instanceof Promise ? await read : read;
    const intent = sessionIntent(headerValue(request, SESSION_ID), body.requestType);
    if (delivery === "response-stream" && intent.kind === "open") throw cannotOpenOnStream();
    const accept = headerValue(request, delivery === "container" ? "accept" : STREAM_ACCEPT);
    const target =
      loaded === undefined
        ? targetModel(
            registry,
            headerValue(request, TARGET_MODEL) || headerValue(request, INFERENCE_COMPONENT),
          )
        : registry.model(loaded);
    const attributes = headerValue(request, CUSTOM_ATTRIBUTES);
    const disconnect = watchDisconnect(request, reply);
    try {
      switch (intent.kind) {
        case "none": {
          const model = invokedModel(registry, target, defaultModel);
          const step = prepareStep(body, model, request, accept, disconnect.signal, request.principal);
          if (model.sequences !== undefined && step.request.sequence === undefined) {
            throw invalidArg(
              `model '${model.name}' keeps state per session: open a session with X-Amzn-SageMaker-Session-Id: ${NEW_SESSION} (or send KServe sequence parameters)`,
            );
          }
          return await answer(reply, delivery, await start(model, step.request), step);
        }
        case "open": {
          const model = invokedModel(registry, target, defaultModel);
          // The body is read, and its inputs checked against the model, before the session
          // exists: a bad one opens nothing (nor counts a session ended).
          const step = body.hasInputs
            ? prepareStep(body, model, request, accept, disconnect.signal, request.principal)
            : undefined;
          if (step !== undefined) {
            refuseSequenceFields(step.request);
            validateRequest(model.config, step.request);
          }
          const session = await sessions.open(model, request.principal);
          let value: string;
          try {
            value = newSessionHeaderValue(session.id, session.expiresAtMs);
          } catch (error) {
            // Its id cannot reach the client: nobody could use or close the session.
            await Promise.resolve(model.sequences?.end(session.id, "forced")).catch(() => {});
            throw error;
          }
          if (step === undefined) {
            reply.header(NEW_SESSION_ID_HEADER, value).header(SESSION_ID_HEADER, value);
            return sendJson(reply, {
              session_id: session.id,
              expires: formatExpiry(session.expiresAtMs),
              model_name: model.name,
              model_version: model.version,
            });
          }
          try {
            const started = await start(
              model,
              inSession(step.request, session.id, false, sessionStep(step.request, attributes)),
            );
            return await answer(reply, delivery, started, step, {
              [NEW_SESSION_ID_HEADER]: value,
              [SESSION_ID_HEADER]: value,
            });
          } catch (error) {
            const told = await sessionEndError(
              sessions,
              model,
              session.id,
              await endReason(model, session.id),
              error,
            );
            // Its id never reached the client (the headers go out only with an answer):
            // nobody could use or close the session. The open's own failure is what the
            // client hears, whatever becomes of this end. An opening step refused before it
            // ran (no room for it to wait: --max-queued-start-bytes) leaves no session, as a
            // START so refused leaves no sequence, and no end is counted; one that ran ends
            // the session `forced`, as a START refused after it ran ends its sequence.
            if (model.sequences?.withdraw?.(session.id) !== true)
              await Promise.resolve(model.sequences?.end(session.id, "forced")).catch(() => {});
            throw told;
          }
        }
        case "continue":
        case "close": {
          const { id } = intent;
          const { model, closed } = await sessions.locate(id, target);
          const close = intent.kind === "close";
          if (close && !body.hasInputs) {
            if (closed !== undefined) throw closed;
            await model.sequences!.close(id, { principal: request.principal });
            reply.header(CLOSED_SESSION_ID_HEADER, id);
            const closedAnswer = { session_id: id, closed: true };
            return delivery === "response-stream"
              ? sendOnePart(reply, "application/json", JSON.stringify(closedAnswer))
              : sendJson(reply, closedAnswer);
          }
          // A closed session still answers the numbered retry of a step it recorded (its
          // CLOSE, whose answer was lost): the core answers it from the record of the end,
          // as a retried KServe END. Anything else only hears that it is closed, whatever
          // its body.
          let step: Step;
          let number: number | undefined;
          try {
            step = prepareStep(body, model, request, accept, disconnect.signal, request.principal);
            refuseSequenceFields(step.request);
            number = sessionStep(step.request, attributes);
          } catch (error) {
            throw closed ?? error;
          }
          if (closed !== undefined && number === undefined) throw closed;
          const started = await start(model, inSession(step.request, id, close, number)).catch(
            async (error: unknown) => {
              if (error instanceof ServerError && error.reason === "sequence_unknown") {
                // Closed, and the core had no answer of this step to give.
                if (closed !== undefined) throw closed;
                // The session ended after it was found (closed on another replica while
                // this one held it): the caller is told so as for any session no longer usable.
                await sessions.find(id, target);
              }
              const ended = await endReason(model, id);
              const told = await sessionEndError(sessions, model, id, ended, error);
              if (told !== error || !close) throw told;
              // A CLOSE whose last step fails still closes its session, as a failed END
              // still ends its sequence: the caller is told, and where a retry would only
              // hear that the session is closed.
              if (close && closed === undefined && ended !== undefined) {
                const failure = error instanceof HttpError ? error : asServerError(error);
                throw new HttpError(
                  failure instanceof HttpError
                    ? failure.status
                    : SAGEMAKER_HTTP_STATUS[sageMakerCoded(failure).code],
                  `${failure.message} (the session is closed all the same: a CLOSE ends its session even when its last step fails)`,
                  {
                    ...(failure instanceof HttpError ? failure.headers : {}),
                    [CLOSED_SESSION_ID_HEADER]: id,
                  },
                );
              }
              throw error;
            },
          );
          return await answer(
            reply,
            delivery,
            started,
            step,
            close ? { [CLOSED_SESSION_ID_HEADER]: id } : {},
          );
        }
      }
    } finally {
      disconnect.dispose();
    }
  };

  /**
   * Sends a started request's answer: one answer as the container sends it, else (a
   * decoupled model's responses, or any answer on the response stream) as it streams.
   */
  const answer = (
    reply: FastifyReply,
    delivery: Delivery,
    started: Started,
    step: Step,
    headers: Readonly<Record<string, string>> = {},
  ): Promise<FastifyReply | undefined> | FastifyReply => {
    if (delivery === "container" && started.kind === "one")
      return sendAnswer(reply, started.response, step.answer, step.encoding, headers);
    return deliverStreamed(reply, started, {
      delivery,
      answer: step.answer,
      encoding: step.encoding,
      headers,
      budgets,
      idleTimeoutMs,
    });
  };

  app.decorateRequest("sageMakerForwarded", false);
  /**
   * What SageMaker's runtime checks itself, from the headers alone, before a container
   * sees the request (its refusals keep their own type): a SessionId's form, and that
   * the response stream opens no session. Past them, the request is the container's.
   */
  const runtimeChecks =
    (delivery: Delivery) =>
    (request: FastifyRequest, _reply: FastifyReply, done: (error?: Error) => void): void => {
      const session = headerValue(request, SESSION_ID);
      try {
        if (session === NEW_SESSION && delivery === "response-stream") throw cannotOpenOnStream();
        if (session && session !== NEW_SESSION) checkSessionId(session);
      } catch (error) {
        done(error as Error);
        return;
      }
      request.sageMakerForwarded = true;
      done();
    };

  app.post("/invocations", { schema: SAGEMAKER_SCHEMAS.invocations }, (request, reply) =>
    invoke("container", false, request, reply),
  );
  // A multi-model endpoint's invocation, in every body form and with sessions, as
  // /invocations, of the model SageMaker calls by its hash (model_name), under the name it
  // is served; Triton answers 404 without a body for a model it has not loaded.
  app.post(
    "/models/:name/invoke",
    { schema: SAGEMAKER_SCHEMAS.modelInvoke },
    (request: FastifyRequest<{ Params: { name: string } }>, reply) => {
      const loaded = options.models.model(request.params.name);
      if (loaded === undefined) return reply.code(SAGEMAKER_HTTP_STATUS.NOT_FOUND).send();
      // An invocation that ran out of memory is 507, as a load's, as Triton's
      // (SageMakerMMEHandleOOMError): SageMaker then unloads other models.
      return invoke("container", false, request, reply, loaded.served).catch((error: unknown) => {
        if (!isOutOfMemory(error)) throw error;
        throw new HttpError(
          SAGEMAKER_HTTP_ANSWERS.outOfMemory,
          error instanceof Error ? error.message : String(error),
        );
      });
    },
  );
  app.post(
    "/endpoints/:endpoint/invocations",
    { schema: SAGEMAKER_SCHEMAS.endpointInvocations, onRequest: runtimeChecks("container") },
    (request, reply) => invoke("container", true, request, reply),
  );
  app.post(
    "/endpoints/:endpoint/invocations-response-stream",
    {
      schema: SAGEMAKER_SCHEMAS.endpointInvocationsResponseStream,
      onRequest: runtimeChecks("response-stream"),
    },
    (request, reply) => invoke("response-stream", true, request, reply),
  );
}
