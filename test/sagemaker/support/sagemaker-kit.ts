import assert from "node:assert/strict";
import {
  InvokeEndpointCommand,
  type InvokeEndpointCommandOutput,
  InvokeEndpointWithResponseStreamCommand,
  SageMakerRuntimeClient,
} from "@aws-sdk/client-sagemaker-runtime";
import { SILERO_SAMPLES, SILERO_SR_BYTES } from "../../support/silero-oracle.ts";

// The AWS SDK for JavaScript, unmodified, pointed at a seqserve: a custom endpoint and
// dummy credentials (seqserve does not check signatures). Plus the bodies the tests send
// and a reader for the binary tensor answers of Triton's SageMaker form.

export const BINARY_JSON = "application/vnd.sagemaker-triton.binary+json";
/** What the SDK reports as NewSessionId: `<id>; Expires=YYYY-MM-DDThh:mm:ssZ`. */
export const NEW_SESSION_ID =
  /^([0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}); Expires=(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ)$/;

/**
 * A client of the server's SageMaker port. `maxAttempts`: 1 unless given (a refused
 * request is an answer to check, not something to retry); undefined: the SDK's default.
 */
export function sdkClient(port: number, maxAttempts: number | undefined = 1): SageMakerRuntimeClient {
  return new SageMakerRuntimeClient({
    endpoint: `http://127.0.0.1:${port}`,
    region: "us-east-1",
    credentials: { accessKeyId: "AKIDEXAMPLE", secretAccessKey: "not-checked" },
    ...(maxAttempts === undefined ? {} : { maxAttempts }),
  });
}

export interface Invocation {
  readonly body: Uint8Array | string;
  readonly contentType?: string;
  readonly accept?: string;
  readonly sessionId?: string;
  readonly targetModel?: string;
  /** X-Amzn-SageMaker-Custom-Attributes, e.g. `sequence_step=3`. */
  readonly customAttributes?: string;
}

/** The fields InvokeEndpoint and InvokeEndpointWithResponseStream share. */
function sharedFields(invocation: Omit<Invocation, "targetModel">) {
  return {
    EndpointName: "seqserve",
    Body: typeof invocation.body === "string" ? Buffer.from(invocation.body) : invocation.body,
    ContentType: invocation.contentType ?? "application/json",
    ...(invocation.accept === undefined ? {} : { Accept: invocation.accept }),
    ...(invocation.sessionId === undefined ? {} : { SessionId: invocation.sessionId }),
    ...(invocation.customAttributes === undefined ? {} : { CustomAttributes: invocation.customAttributes }),
  };
}

/** InvokeEndpoint; `abortSignal`, as the SDK takes it, gives up on the call. */
export function invoke(
  client: SageMakerRuntimeClient,
  invocation: Invocation,
  abortSignal?: AbortSignal,
): Promise<InvokeEndpointCommandOutput> {
  return client.send(
    new InvokeEndpointCommand({
      ...sharedFields(invocation),
      ...(invocation.targetModel === undefined ? {} : { TargetModel: invocation.targetModel }),
    }),
    abortSignal === undefined ? {} : { abortSignal },
  );
}

export interface StreamedInvocation {
  /** The payload's type (X-Amzn-SageMaker-Content-Type). */
  readonly contentType: string | undefined;
  /** Each PayloadPart's bytes, in order. */
  readonly parts: Buffer[];
  /** What the iteration raised after the parts (a ModelStreamError), if anything. */
  readonly error: Error | undefined;
}

/**
 * InvokeEndpointWithResponseStream, its parts read to the end. A failure before the
 * stream (the SDK's exception for an error answer) rejects; one during it is `error`.
 */
export async function invokeStream(
  client: SageMakerRuntimeClient,
  invocation: Omit<Invocation, "targetModel">,
): Promise<StreamedInvocation> {
  const output = await client.send(new InvokeEndpointWithResponseStreamCommand(sharedFields(invocation)));
  const parts: Buffer[] = [];
  try {
    for await (const event of output.Body!) {
      if (event.PayloadPart?.Bytes !== undefined) parts.push(Buffer.from(event.PayloadPart.Bytes));
    }
  } catch (error) {
    return { contentType: output.ContentType, parts, error: error as Error };
  }
  return { contentType: output.ContentType, parts, error: undefined };
}

/** The session id in a NewSessionId, and its expiry (epoch ms). */
export function newSession(output: InvokeEndpointCommandOutput): { id: string; expiresAtMs: number } {
  const match = NEW_SESSION_ID.exec(output.NewSessionId ?? "");
  if (match === null)
    throw new Error(`not a new session: NewSessionId ${JSON.stringify(output.NewSessionId)}`);
  return { id: match[1]!, expiresAtMs: Date.parse(match[2]!) };
}

/** Opens a session the way AWS documents it: the NEW_SESSION header and body. */
export async function openSession(
  client: SageMakerRuntimeClient,
  targetModel?: string,
): Promise<{ id: string; expiresAtMs: number }> {
  const output = await invoke(client, {
    body: JSON.stringify({ requestType: "NEW_SESSION" }),
    sessionId: "NEW_SESSION",
    ...(targetModel === undefined ? {} : { targetModel }),
  });
  return newSession(output);
}

export async function closeSession(
  client: SageMakerRuntimeClient,
  id: string,
  targetModel?: string,
): Promise<InvokeEndpointCommandOutput> {
  return invoke(client, {
    body: JSON.stringify({ requestType: "CLOSE" }),
    sessionId: id,
    ...(targetModel === undefined ? {} : { targetModel }),
  });
}

/** A Silero VAD chunk in Triton's SageMaker binary form: the JSON header, the audio, `sr`. */
export function sileroBinaryBody(
  chunk: Float32Array,
  extra: Record<string, unknown> = {},
): {
  body: Buffer;
  contentType: string;
} {
  const header = Buffer.from(
    JSON.stringify({
      ...extra,
      inputs: [
        {
          name: "input",
          datatype: "FP32",
          shape: [1, SILERO_SAMPLES],
          parameters: { binary_data_size: chunk.byteLength },
        },
        { name: "sr", datatype: "INT64", shape: [], parameters: { binary_data_size: 8 } },
      ],
    }),
  );
  return {
    body: Buffer.concat([
      header,
      Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength),
      SILERO_SR_BYTES,
    ]),
    contentType: `${BINARY_JSON};json-header-size=${header.byteLength}`,
  };
}

/** A Silero VAD chunk as a KServe v2 JSON request (FP32 data as decimals that read back exactly). */
export function sileroJsonBody(chunk: Float32Array, extra: Record<string, unknown> = {}): string {
  return JSON.stringify({
    ...extra,
    inputs: [
      { name: "input", datatype: "FP32", shape: [1, SILERO_SAMPLES], data: [...chunk] },
      { name: "sr", datatype: "INT64", shape: [], data: [16000] },
    ],
  });
}

/** The outputs of a binary answer (`…binary+json;json-header-size=N`), by name. */
export function binaryAnswer(output: InvokeEndpointCommandOutput): Map<string, Buffer> {
  const match = /^application\/vnd\.sagemaker-triton\.binary\+json;json-header-size=(\d+)$/.exec(
    output.ContentType ?? "",
  );
  if (match === null) throw new Error(`not a binary answer: Content-Type ${output.ContentType}`);
  const body = Buffer.from(output.Body!);
  const headerLength = Number(match[1]);
  const header = JSON.parse(body.subarray(0, headerLength).toString()) as {
    outputs: { name: string; parameters?: { binary_data_size?: number } }[];
  };
  const outputs = new Map<string, Buffer>();
  let offset = headerLength;
  for (const o of header.outputs) {
    const size = o.parameters?.binary_data_size ?? 0;
    outputs.set(o.name, body.subarray(offset, offset + size));
    offset += size;
  }
  return outputs;
}

/** The body of a JSON answer, parsed. */
export function jsonAnswer(output: InvokeEndpointCommandOutput): unknown {
  return JSON.parse(Buffer.from(output.Body!).toString());
}

/** An error the SDK threw, with the fields tests look at. */
export interface SdkError {
  readonly name: string;
  readonly message: string;
  /** The answer's HTTP status (424 for a ModelError). */
  readonly status: number | undefined;
  /** A ModelError's: the container's status and body. */
  readonly originalStatus?: number | undefined;
  readonly originalMessage?: string | undefined;
}

export async function sdkError(promise: Promise<unknown>): Promise<SdkError> {
  try {
    await promise;
  } catch (error) {
    const e = error as {
      name: string;
      message: string;
      $metadata?: { httpStatusCode?: number };
      OriginalStatusCode?: number;
      OriginalMessage?: string;
    };
    return {
      name: e.name,
      message: e.message,
      status: e.$metadata?.httpStatusCode,
      originalStatus: e.OriginalStatusCode,
      originalMessage: e.OriginalMessage,
    };
  }
  throw new Error("the invocation succeeded, an error was expected");
}

/**
 * The message of a container's error inside a ModelError (what `/invocations` would
 * have answered, `{"error": …, "message": …}`), checked to be the same text twice.
 */
export function containerMessage(error: SdkError): string {
  assert.equal(error.name, "ModelError", error.message);
  assert.equal(error.status, 424);
  const body = JSON.parse(error.originalMessage ?? "") as { error: string; message: string };
  assert.equal(body.message, body.error);
  assert.equal(
    error.message,
    `Received ${error.originalStatus! >= 500 ? "server" : "client"} error (${error.originalStatus}) from primary with message "${error.originalMessage}".`,
  );
  return body.error;
}
