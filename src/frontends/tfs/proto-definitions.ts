import { join } from "node:path";
import type { ServiceDefinition } from "@grpc/grpc-js";
import { loadSync, type MethodDefinition, type PackageDefinition } from "@grpc/proto-loader";
import protobuf from "protobufjs";
import { boundedDecoder } from "../grpc/decoded-size.ts";
import { type DecodeLimit, LOADER_OPTIONS, PROTO_DIR } from "../grpc/proto-definitions.ts";
import { decodeNumbersIntoTypedArrays } from "../grpc/typed-array-fields.ts";

// TF-Serving's services from seqserve's proto files (proto/tensorflow_serving/…, with
// TensorFlow's messages under proto/tensorflow/…). As for KServe's ModelInfer, Predict —
// where the message rate is — skips proto-loader's conversions: requests are protobufjs
// messages as decoded (Long objects for 64-bit integers, bytes as views of the received
// message, a TensorProto's *_val values in typed arrays) and responses are encoded
// straight from plain objects.

export const PREDICTION_SERVICE_NAME = "tensorflow.serving.PredictionService";
export const MODEL_SERVICE_NAME = "tensorflow.serving.ModelService";
/** The type URL of the Any in GetModelMetadataResponse.metadata["signature_def"]. */
export const SIGNATURE_DEF_MAP_TYPE_URL = "type.googleapis.com/tensorflow.serving.SignatureDefMap";

const PROTO_FILES = [
  "tensorflow_serving/apis/prediction_service.proto",
  "tensorflow_serving/apis/model_service.proto",
];

let definitions: PackageDefinition | undefined;

/** Every message and service of the TF-Serving protos (loaded once). */
export function tfsPackageDefinition(): PackageDefinition {
  definitions ??= loadSync(PROTO_FILES, LOADER_OPTIONS);
  return definitions;
}

let root: protobuf.Root | undefined;

/**
 * The protobufjs types of the TF-Serving protos, for the hot path and for Any payloads.
 * TensorProto decodes its *_val values into typed arrays.
 */
export function tfsTypes(): protobuf.Root {
  if (root === undefined) {
    root = new protobuf.Root();
    root.resolvePath = (_origin, target) => (target.startsWith("google/") ? target : join(PROTO_DIR, target));
    root.loadSync(PROTO_FILES, { keepCase: true });
    decodeNumbersIntoTypedArrays(root.lookupType("tensorflow.TensorProto"));
  }
  return root;
}

function service(name: string): Record<string, MethodDefinition<object, object>> {
  const definition = tfsPackageDefinition()[name];
  if (definition === undefined || "format" in definition || "valuesById" in definition) {
    throw new Error(`${name} is not a service of seqserve's proto files`);
  }
  return definition as unknown as Record<string, MethodDefinition<object, object>>;
}

const asBuffer = (bytes: Uint8Array): Buffer =>
  Buffer.isBuffer(bytes) ? bytes : Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);

let predictResponse: protobuf.Type | undefined;

/**
 * A PredictResponse encoded ahead of the send, so that its size is known while it waits
 * for a client that reads slowly (the unary answer budget); written as is.
 */
export function encodePredictResponse(message: object): Buffer {
  predictResponse ??= tfsTypes().lookupType("tensorflow.serving.PredictResponse");
  return asBuffer(predictResponse.encode(message).finish());
}

/** tensorflow.serving.PredictionService, with the hot-path codec on Predict. */
export function predictionServiceDefinition(limit?: DecodeLimit): ServiceDefinition {
  const base = service(PREDICTION_SERVICE_NAME);
  const request = tfsTypes().lookupType("tensorflow.serving.PredictRequest");
  return {
    ...base,
    Predict: {
      ...base.Predict!,
      requestDeserialize: boundedDecoder(
        request,
        limit?.maxBytes ?? Number.POSITIVE_INFINITY,
        limit?.refusal,
      ),
      responseSerialize: (message: object) =>
        message instanceof Uint8Array ? asBuffer(message) : encodePredictResponse(message),
    },
  } as ServiceDefinition;
}

export const modelServiceDefinition = (): ServiceDefinition =>
  service(MODEL_SERVICE_NAME) as ServiceDefinition;

/** A SignatureDefMap encoded for GetModelMetadataResponse's Any. */
export function encodeSignatureDefMap(message: object): Buffer {
  return asBuffer(tfsTypes().lookupType("tensorflow.serving.SignatureDefMap").encode(message).finish());
}
