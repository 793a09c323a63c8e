import { join } from "node:path";
import { fileURLToPath } from "node:url";
import type { ServiceDefinition } from "@grpc/grpc-js";
import { loadSync, type MethodDefinition, type Options, type PackageDefinition } from "@grpc/proto-loader";
import protobuf from "protobufjs";
import { boundedDecoder, type DecodeRefusal } from "./decoded-size.ts";
import { decodeNumbersIntoTypedArrays } from "./typed-array-fields.ts";

// Loads seqserve's .proto files (the package's proto/ folder) into grpc-js service
// definitions. The loader options decide how messages look in JavaScript (see
// messages.ts); they are chosen so nothing is lost and little is copied:
// - longs: String keeps int64/uint64 exact (sequence ids up to 2^64-1, config fields);
// - bytes are left as decoded: Buffer views over the received message, never copied;
// - enums by name, absent fields left out, repeated fields and maps always iterable.
//
// The two inference methods, where the message rate is, skip proto-loader's conversions
// (which copy every message into a second object graph): their requests are protobufjs
// messages as decoded (64-bit integers as Long objects, see int64.ts; absent fields at
// their defaults; typed contents in typed arrays, see typed-array-fields.ts) and their
// responses are encoded straight from the plain objects the frontend builds.

export const PROTO_DIR = fileURLToPath(new URL("../../../proto/", import.meta.url));

export const LOADER_OPTIONS: Options = {
  keepCase: true,
  longs: String,
  enums: String,
  defaults: false,
  arrays: true,
  objects: true,
  oneofs: true,
  includeDirs: [PROTO_DIR],
};

export const INFERENCE_SERVICE_NAME = "inference.GRPCInferenceService";
export const HEALTH_SERVICE_NAME = "grpc.health.v1.Health";

let definitions: PackageDefinition | undefined;

/** Every message and service of grpc_service.proto and health.proto (loaded once). */
export function packageDefinition(): PackageDefinition {
  definitions ??= loadSync(["grpc_service.proto", "health.proto"], LOADER_OPTIONS);
  return definitions;
}

function service(name: string): ServiceDefinition {
  const definition = packageDefinition()[name];
  if (definition === undefined || "format" in definition || "valuesById" in definition) {
    throw new Error(`${name} is not a service of seqserve's proto files`);
  }
  return definition as ServiceDefinition;
}

interface HotTypes {
  readonly request: protobuf.Type;
  readonly response: protobuf.Type;
  readonly streamResponse: protobuf.Type;
}

let hotTypes: HotTypes | undefined;

let inferenceRoot: protobuf.Root | undefined;

/**
 * The protobufjs types of the KServe v2 protos (also for clients, such as the
 * benchmark's). InferTensorContents decodes its values into typed arrays.
 */
export function inferenceTypes(): protobuf.Root {
  if (inferenceRoot === undefined) {
    inferenceRoot = new protobuf.Root().loadSync(join(PROTO_DIR, "grpc_service.proto"), { keepCase: true });
    decodeNumbersIntoTypedArrays(inferenceRoot.lookupType("inference.InferTensorContents"));
  }
  return inferenceRoot;
}

function hot(): HotTypes {
  if (hotTypes === undefined) {
    const root = inferenceTypes();
    hotTypes = {
      request: root.lookupType("inference.ModelInferRequest"),
      response: root.lookupType("inference.ModelInferResponse"),
      streamResponse: root.lookupType("inference.ModelStreamInferResponse"),
    };
  }
  return hotTypes;
}

const asBuffer = (bytes: Uint8Array): Buffer =>
  Buffer.isBuffer(bytes) ? bytes : Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);

/** Encodes a plain message; bytes already encoded (see encodeStreamInferResponse) pass through. */
function encoder(type: protobuf.Type): (message: object) => Buffer {
  return (message) =>
    message instanceof Uint8Array ? asBuffer(message) : asBuffer(type.encode(message).finish());
}

/**
 * A ModelStreamInferResponse encoded ahead of the write, so the stream can see its size
 * (grpc-js ends the whole call on a message over the send limit); written as is.
 */
export function encodeStreamInferResponse(message: object): Buffer {
  return asBuffer(hot().streamResponse.encode(message).finish());
}

/**
 * A ModelInferResponse encoded ahead of the send, so that its size is known while it
 * waits for a client that reads slowly (unary-answer-budget.ts); written as is.
 */
export function encodeModelInferResponse(message: object): Buffer {
  return asBuffer(hot().response.encode(message).finish());
}

/** What a request may take once decoded, and where a refusal's reason goes (decoded-size.ts). */
export interface DecodeLimit {
  readonly maxBytes: number;
  readonly refusal: DecodeRefusal;
}

function withHotCodec(
  method: MethodDefinition<object, object>,
  response: protobuf.Type,
  limit: DecodeLimit | undefined,
): MethodDefinition<object, object> {
  return {
    ...method,
    requestDeserialize: boundedDecoder(
      hot().request,
      limit?.maxBytes ?? Number.POSITIVE_INFINITY,
      limit?.refusal,
    ),
    responseSerialize: encoder(response),
  };
}

/** inference.GRPCInferenceService, with the hot-path codec on ModelInfer and ModelStreamInfer. */
export function inferenceServiceDefinition(limit?: DecodeLimit): ServiceDefinition {
  const base = service(INFERENCE_SERVICE_NAME) as Record<string, MethodDefinition<object, object>>;
  const { response, streamResponse } = hot();
  return {
    ...base,
    ModelInfer: withHotCodec(base.ModelInfer!, response, limit),
    ModelStreamInfer: withHotCodec(base.ModelStreamInfer!, streamResponse, limit),
  } as ServiceDefinition;
}

export const healthServiceDefinition = (): ServiceDefinition => service(HEALTH_SERVICE_NAME);
