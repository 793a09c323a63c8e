import type { ServerUnaryCall } from "@grpc/grpc-js";
import { cancelled, invalidArg } from "../../core/errors.ts";
import type { ServerContext } from "../../core/model.ts";
import type { Tensor } from "../../core/tensor.ts";
import type { Logger } from "../../observability/logger.ts";
import { callSites, type IdentifyModel, recordCall } from "../common/api-call-recording.ts";
import { routedSequenceId, SEQUENCE_ID_METADATA } from "../common/sequence-routing.ts";
import { principalOf } from "../grpc/grpc-access.ts";
import { int64ToNumber } from "../grpc/int64.ts";
import type { DecodeLimit } from "../grpc/proto-definitions.ts";
import type { GrpcServiceRegistration } from "../grpc/service-registration.ts";
import { unary } from "../grpc/unary-handler.ts";
import { TFS_GRPC_STATUS, tfsError } from "./error-status.ts";
import type {
  GetModelMetadataRequestMessage,
  GetModelStatusRequestMessage,
  ModelSpecMessage,
  PredictRequestMessage,
  PredictResponseMessage,
  TensorProtoMessage,
  TensorProtoToEncode,
} from "./messages.ts";
import { modelStatus, type Signature, signatureOf } from "./model-info.ts";
import { scalarOutputsAsModel } from "./model-scalars.ts";
import { DEFAULT_SIGNATURE, findModel, type ModelSelector, predict, sequenceOf } from "./predict.ts";
import {
  encodePredictResponse,
  encodeSignatureDefMap,
  modelServiceDefinition,
  predictionServiceDefinition,
  SIGNATURE_DEF_MAP_TYPE_URL,
} from "./proto-definitions.ts";
import {
  SEQUENCE_CONTROL_INPUT,
  SEQUENCE_ID_INPUT,
  SEQUENCE_STEP_INPUT,
  type SpecialInput,
  specialInputsOf,
} from "./special-inputs.ts";
import { decodeTensorProto, encodeTensorProto, sequenceIdProto, shapeOf } from "./tensor-proto.ts";

// tensorflow.serving.PredictionService (Predict, GetModelMetadata) and
// tensorflow.serving.ModelService (GetModelStatus, HandleReloadConfigRequest) over a ServerContext, with OpenVINO
// Model Server's stateful semantics. Handlers only translate; errors leave through the
// family's one table (error-status.ts).

export interface TfsGrpcOptions {
  readonly context: ServerContext;
  readonly logger: Logger;
  /** What a TensorProto whose one value fills its shape may expand to, in bytes. */
  readonly maxExpandedBytes?: number;
  /** What a Predict request may take once decoded (decoded-size.ts). */
  readonly decodeLimit?: DecodeLimit;
}

/** The model a ModelSpec names (OVMS: a request without model_spec is refused). */
function selectorOf(spec: ModelSpecMessage | null | undefined): ModelSelector {
  if (spec === null || spec === undefined) throw invalidArg("model_spec missing in request");
  const version = spec.version?.value;
  const number = version === undefined ? 0 : int64ToNumber(version);
  return {
    name: spec.name ?? "",
    version: number === 0 ? undefined : String(number),
    label: spec.version_label,
  };
}

/** A special input where OVMS reads it: its dims and its uint64_val / uint32_val values. */
function specialInput(
  proto: TensorProtoMessage | undefined,
  field: "uint64_val" | "uint32_val",
): SpecialInput | undefined {
  if (proto === undefined) return undefined;
  const dims = shapeOf(proto.tensor_shape);
  const values = proto[field];
  return {
    dims: dims === undefined || dims.length === 0 ? undefined : dims,
    values:
      values === undefined || values.length === 0
        ? undefined
        : Array.from(values as ArrayLike<number | bigint>, (v) => BigInt(v)),
  };
}

function specOf(name: string, version: string): ModelSpecMessage {
  return { name, version: { value: version }, signature_name: DEFAULT_SIGNATURE };
}

/** Runs `fn`, turning what it throws into this family's errors (OVMS's texts). */
function worded<Request, Response>(
  fn: (request: Request, call: ServerUnaryCall<Request, Response>) => Response | Promise<Response>,
): (request: Request, call: ServerUnaryCall<Request, Response>) => Promise<Response> {
  return async (request, call) => {
    try {
      return await fn(request, call);
    } catch (error) {
      throw tfsError(error);
    }
  };
}

function signatureMessage(signature: Signature): object {
  const infos = (map: Signature["inputs"]) =>
    Object.fromEntries(
      [...map].map(([name, info]) => [
        name,
        { name: info.name, dtype: info.dtype, tensor_shape: { dim: info.dims.map((size) => ({ size })) } },
      ]),
    );
  return {
    signature_def: {
      [DEFAULT_SIGNATURE]: {
        inputs: infos(signature.inputs),
        outputs: infos(signature.outputs),
        method_name: signature.methodName,
      },
    },
  };
}

/** The calls OpenVINO Model Server's metrics count per model. */
const GRPC_CALLS = callSites("TensorFlowServing", "gRPC");

export function tfsGrpcServices(options: TfsGrpcOptions): GrpcServiceRegistration[] {
  const { context, logger } = options;
  const registry = context.registry;
  const apiCalls = context.apiCalls;

  const predictCall = async (
    message: PredictRequestMessage,
    call: ServerUnaryCall<PredictRequestMessage, Buffer>,
    identify: IdentifyModel,
  ): Promise<Buffer> => {
    const model = findModel(registry, selectorOf(message.model_spec));
    identify(model.name, model.version);
    const protos = message.inputs ?? {};
    const specials = specialInputsOf(model);
    const sequence = sequenceOf(
      model,
      specialInput(protos[SEQUENCE_ID_INPUT], "uint64_val"),
      specialInput(protos[SEQUENCE_CONTROL_INPUT], "uint32_val"),
      specials.has(SEQUENCE_STEP_INPUT) ? specialInput(protos[SEQUENCE_STEP_INPUT], "uint64_val") : undefined,
      routedSequenceId(call.metadata.get(SEQUENCE_ID_METADATA)[0]?.toString()),
    );
    // Every name is checked before any tensor is read: a name the model does not have
    // is refused without expanding its values.
    const known = new Set(model.inputs.map((input) => input.name));
    for (const name in protos) {
      if (sequence !== undefined && specials.has(name)) continue;
      if (!known.has(name))
        throw invalidArg(`unexpected inference input '${name}' for model '${model.name}'`);
    }
    const inputs = new Map<string, Tensor>();
    const fill = { bytesLeft: options.maxExpandedBytes ?? Number.POSITIVE_INFINITY };
    for (const name in protos) {
      if (sequence !== undefined && specials.has(name)) continue;
      inputs.set(name, decodeTensorProto(name, protos[name]!, fill));
    }
    const controller = new AbortController();
    const onCancel = (): void =>
      controller.abort(cancelled("request cancelled: the client cancelled the call"));
    if (call.cancelled) onCancel();
    else call.once("cancelled", onCancel);
    try {
      const { response, sequenceId } = await predict({
        model,
        inputs,
        sequence,
        // output_filter is not read, as OVMS does not read it: every output comes back.
        outputs: undefined,
        signal: controller.signal,
        principal: principalOf(call.metadata),
      });
      const outputs: Record<string, TensorProtoToEncode> = {};
      for (const output of scalarOutputsAsModel(model.config, response.outputs)) {
        outputs[output.name] = encodeTensorProto(output);
      }
      if (sequenceId !== undefined) outputs[SEQUENCE_ID_INPUT] = sequenceIdProto(sequenceId);
      const answer: PredictResponseMessage = {
        model_spec: specOf(response.modelName, response.modelVersion),
        outputs,
      };
      return encodePredictResponse(answer);
    } finally {
      call.off("cancelled", onCancel);
    }
  };

  const getModelMetadata = (message: GetModelMetadataRequestMessage, identify: IdentifyModel) => {
    const selector = selectorOf(message.model_spec);
    const fields = message.metadata_field ?? [];
    if (fields.length !== 1 || fields[0] !== "signature_def") {
      throw invalidArg(
        `Invalid signature name - metadata_field must be ["signature_def"], got ${JSON.stringify(fields)}`,
      );
    }
    const model = findModel(registry, selector);
    identify(model.name, model.version);
    const metadata = registry.metadata(model.name, model.version);
    return {
      model_spec: { name: model.name, version: { value: model.version }, signature_name: "" },
      metadata: {
        signature_def: {
          type_url: SIGNATURE_DEF_MAP_TYPE_URL,
          value: encodeSignatureDefMap(signatureMessage(signatureOf(metadata, model.config))),
        },
      },
    };
  };

  const getModelStatus = (message: GetModelStatusRequestMessage, identify: IdentifyModel) => {
    const selector = selectorOf(message.model_spec);
    const status = modelStatus(registry, selector.name, selector.version);
    identify(selector.name);
    return {
      model_version_status: status.map((s) => ({
        version: s.version,
        state: s.state,
        status: { error_code: s.errorCode, error_message: s.errorMessage },
      })),
    };
  };

  return [
    {
      definition: predictionServiceDefinition(options.decodeLimit),
      implementation: {
        Predict: unary(
          logger,
          "Predict",
          worded((message: PredictRequestMessage, call: ServerUnaryCall<PredictRequestMessage, Buffer>) =>
            recordCall(apiCalls, GRPC_CALLS.Predict, (identify) => predictCall(message, call, identify)),
          ),
          TFS_GRPC_STATUS,
        ),
        GetModelMetadata: unary(
          logger,
          "GetModelMetadata",
          worded((message: GetModelMetadataRequestMessage) =>
            recordCall(apiCalls, GRPC_CALLS.GetModelMetadata, (identify) =>
              getModelMetadata(message, identify),
            ),
          ),
          TFS_GRPC_STATUS,
        ),
      },
    },
    {
      definition: modelServiceDefinition(),
      implementation: {
        GetModelStatus: unary(
          logger,
          "GetModelStatus",
          worded((message: GetModelStatusRequestMessage) =>
            recordCall(apiCalls, GRPC_CALLS.GetModelStatus, (identify) => getModelStatus(message, identify)),
          ),
          TFS_GRPC_STATUS,
        ),
        // OVMS answers success and applies nothing: it reloads its config files itself (as
        // seqserve does, with its watch or POST /v1/config/reload); the config a client
        // pushes is not read.
        HandleReloadConfigRequest: unary(
          logger,
          "HandleReloadConfigRequest",
          () => {
            logger.info(
              { event: "reload_config_request" },
              "HandleReloadConfigRequest: the config files are reloaded by the server itself; the config in the request is not applied",
            );
            return {};
          },
          TFS_GRPC_STATUS,
        ),
      },
    },
  ];
}
