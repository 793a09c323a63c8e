import type { ServerUnaryCall } from "@grpc/grpc-js";
import {
  cancelled,
  invalidArg,
  SERVER_EXITING,
  SERVER_NOT_READY,
  ServerError,
  unavailable,
} from "../../core/errors.ts";
import type { InferResponse, SequenceId } from "../../core/infer.ts";
import type { ModelLoadOptions, ModelMetadata, ServerContext, TensorMetadata } from "../../core/model.ts";
import type { Refusals } from "../../core/refusals.ts";
import type { SharedMemoryRegions } from "../../core/shared-memory.ts";
import type { Logger } from "../../observability/logger.ts";
import { callSites, type IdentifyModel, recordCall, recordReadiness } from "../common/api-call-recording.ts";
import { classificationFor, classifyOutputs } from "../common/kserve/classification.ts";
import {
  cudaSharedMemoryStatus,
  registerCudaSharedMemory,
  unregisterCudaSharedMemory,
} from "../common/kserve/cuda-shared-memory.ts";
import { readLoadParameters, repositoryNameRefusal } from "../common/kserve/load-parameters.ts";
import { logSettingsChange, logSettingsWire } from "../common/kserve/log-settings-wire.ts";
import { modelVersion } from "../common/kserve/model-version.ts";
import type { SharedMemoryHold } from "../common/kserve/shared-memory-tensors.ts";
import {
  traceSettingsChange,
  traceSettingsRequest,
  traceSettingsValues,
} from "../common/kserve/trace-settings-wire.ts";
import type { ResponseBudgets } from "../common/response-budget.ts";
import { routedSequenceId, SEQUENCE_ID_METADATA, withRoutedSequenceId } from "../common/sequence-routing.ts";
import { withTraceContext } from "../common/trace-context.ts";
import { statusOf } from "./error-status.ts";
import { principalOf } from "./grpc-access.ts";
import { decodeInferRequest } from "./infer-request-decoder.ts";
import { encodeInferResponse } from "./infer-response-encoder.ts";
import { type Int64, int64ToNumber } from "./int64.ts";
import type {
  ModelIndexMessage,
  ModelInferRequestMessage,
  ModelInferResponseMessage,
  ModelMetadataResponseMessage,
  ModelRepositoryParameterMessage,
  ModelRequestMessage,
  RepositoryIndexRequestMessage,
  RepositoryModelRequestMessage,
  TensorMetadataMessage,
} from "./messages.ts";
import {
  type DecodeLimit,
  encodeModelInferResponse,
  inferenceServiceDefinition,
} from "./proto-definitions.ts";
import type { GrpcServiceRegistration } from "./service-registration.ts";
import { STREAM_ORDER_METADATA, type StreamInferCall, StreamInferSession } from "./stream-infer.ts";
import { unary } from "./unary-handler.ts";

// inference.GRPCInferenceService (KServe v2 / Triton) over a ServerContext. Handlers only
// translate: the registry and the models do the work, errors map through the KServe
// family's table (common/kserve/error-status.ts).

export interface InferenceServiceOptions {
  readonly context: ServerContext;
  readonly logger: Logger;
  /** Unanswered requests allowed per ModelStreamInfer stream before reading pauses. */
  readonly maxInflightPerStream: number;
  /** The server's send limit: a larger stream response is refused in-band. */
  readonly maxMessageBytes: number;
  /** Per-connection budgets of answers waiting for slow readers. */
  readonly budgets: ResponseBudgets;
  /** A ModelStreamInfer client that takes no answer for this long has its stream reset; default never. */
  readonly streamStallTimeoutMs?: number | undefined;
  readonly streamMaxHeldRequestBytes?: number | undefined;
  /** Where a stream reset for want of reading is counted. */
  readonly refusals?: Refusals | undefined;
  /** What a ModelInfer or ModelStreamInfer request may take once decoded (decoded-size.ts). */
  readonly decodeLimit?: DecodeLimit | undefined;
}

/** "" means "not given" on the wire (proto3 has no absent strings). */
const given = (value: string | undefined): string | undefined =>
  value === undefined || value === "" ? undefined : value;

function tensorMetadata(tensors: readonly TensorMetadata[]): TensorMetadataMessage[] {
  return tensors.map((t) => ({ name: t.name, datatype: t.datatype, shape: t.shape }));
}

function metadataMessage(metadata: ModelMetadata): ModelMetadataResponseMessage {
  return {
    name: metadata.name,
    versions: metadata.versions,
    platform: metadata.platform,
    inputs: tensorMetadata(metadata.inputs),
    outputs: tensorMetadata(metadata.outputs),
  };
}

/** RepositoryModelLoad's parameters, typed: `config` a string_param, files bytes_param. */
function loadOptions(
  model: string,
  parameters: Readonly<Record<string, ModelRepositoryParameterMessage>> | undefined,
): ModelLoadOptions {
  return readLoadParameters(Object.entries(parameters ?? {}), {
    config: (parameter) => {
      if (parameter.parameter_choice !== "string_param") {
        throw invalidArg(
          `invalid value type for 'config' parameter of model '${model}', expected string_param.`,
        );
      }
      return parameter.string_param ?? "";
    },
    file: (parameter, name) => {
      if (parameter.parameter_choice !== "bytes_param") {
        throw invalidArg(`invalid value type for load parameter '${name}', expected bytes_param.`);
      }
      return parameter.bytes_param ?? new Uint8Array(0);
    },
    unknown: (name) => invalidArg(`unrecognized load parameter '${name}'.`),
  });
}

const named = (repository: string | undefined): boolean => repository !== undefined && repository !== "";

/** RepositoryModelUnload's one parameter, `unload_dependents`, a bool_param (as Triton reads only it). */
function checkUnloadParameters(
  parameters: Readonly<Record<string, ModelRepositoryParameterMessage>> | undefined,
): void {
  const dependents = parameters?.unload_dependents;
  // Accepted for Triton's clients; seqserve models have no dependents (no ensembles).
  if (dependents !== undefined && dependents.parameter_choice !== "bool_param") {
    throw invalidArg("invalid value type for 'unload_dependents' parameter, expected bool_param.");
  }
}

function unsupported(what: string): () => never {
  return () => {
    throw new ServerError("UNSUPPORTED", `${what} is not supported by this server`);
  };
}

/** A LogSettingsRequest / LogSettingsResponse SettingValue, as proto-loader gives it. */
interface SettingValueMessage {
  readonly parameter_choice?: "bool_param" | "uint32_param" | "string_param";
  readonly bool_param?: boolean;
  readonly uint32_param?: number;
  readonly string_param?: string;
}

interface TraceSettingRequestMessage {
  readonly settings?: Readonly<Record<string, { readonly value?: readonly string[] }>>;
  readonly model_name?: string;
}

interface TraceSettingResponseMessage {
  readonly settings: Readonly<Record<string, { readonly value: readonly string[] }>>;
}

interface LogSettingsMessage {
  readonly settings?: Readonly<Record<string, SettingValueMessage>>;
}

function settingValue(value: SettingValueMessage): unknown {
  switch (value.parameter_choice) {
    case "bool_param":
      return value.bool_param ?? false;
    case "uint32_param":
      return value.uint32_param ?? 0;
    case "string_param":
      return value.string_param ?? "";
    default:
      return undefined;
  }
}

interface SharedMemoryNameMessage {
  readonly name?: string;
}

interface SystemSharedMemoryRegisterMessage {
  readonly name?: string;
  readonly key?: string;
  readonly offset?: Int64;
  readonly byte_size?: Int64;
}

interface SystemSharedMemoryStatusMessage {
  readonly regions: Readonly<
    Record<string, { name: string; key: string; offset: number; byte_size: number }>
  >;
}

/** A uint64 field of a register request, as a number of bytes. */
function byteCount(value: Int64 | undefined, field: string): number {
  const count = int64ToNumber(value ?? 0, true);
  if (!Number.isSafeInteger(count)) {
    throw invalidArg(`Unable to parse '${field}': ${count} is more bytes than a region can have`);
  }
  return count;
}

/** The calls OpenVINO Model Server's metrics count per model. */
const GRPC_CALLS = callSites("KServe", "gRPC");

/** Handlers of inference.GRPCInferenceService, ready to add to a grpc-js server. */
export function inferenceService(options: InferenceServiceOptions): GrpcServiceRegistration {
  const { context, logger } = options;
  const registry = context.registry;
  const sharedMemoryRegions = (what: string): SharedMemoryRegions =>
    context.sharedMemory ?? unsupported(what)();

  const modelInfer = (
    message: ModelInferRequestMessage,
    call: ServerUnaryCall<ModelInferRequestMessage, ModelInferResponseMessage>,
    identify: IdentifyModel,
  ): Promise<ModelInferResponseMessage> => {
    // The message has been read whole: Triton's GRPC_WAITREAD_START and _END, for tracing.
    const readNs = performance.now() * 1e6;
    const controller = new AbortController();
    const onCancel = (): void =>
      controller.abort(cancelled("request cancelled: the client cancelled the call"));
    if (call.cancelled) onCancel();
    else call.once("cancelled", onCancel);
    let pending: Promise<InferResponse>;
    let sharedOutputs: SharedMemoryHold | undefined;
    try {
      // The model first, as Triton finds it before reading the inputs: a request refused
      // for its inputs counts as a failure of that model.
      const model = registry.model(message.model_name ?? "", given(message.model_version));
      identify(model.name, model.version);
      // Triton refuses it before reading the request, in these words (its streaming RPC serves such models).
      if (model.decoupled)
        throw new ServerError(
          "UNSUPPORTED",
          "ModelInfer RPC doesn't support models with decoupled transaction policy",
        );
      const decoded = decodeInferRequest(message, model, {
        signal: controller.signal,
        principal: principalOf(call.metadata),
        sharedMemory: context.sharedMemory,
        received: { frontend: "GRPC", startNs: readNs, endNs: readNs },
      });
      sharedOutputs = decoded.sharedMemory;
      const [traceparent] = call.metadata.get("traceparent");
      const [tracestate] = call.metadata.get("tracestate");
      const routed = routedSequenceId(call.metadata.get(SEQUENCE_ID_METADATA)[0]?.toString());
      const classification = classificationFor(model, decoded.classification);
      const answer = model.infer(
        withTraceContext(withRoutedSequenceId(decoded.request, routed, model), traceparent, tracestate),
      );
      pending =
        classification === undefined
          ? answer
          : answer.then((response) => classifyOutputs(response, classification));
    } catch (error) {
      call.off("cancelled", onCancel);
      sharedOutputs?.use.release();
      return Promise.reject(error);
    }
    // Encoded here, so the connection's budget counts the answer by its size; grpc-js
    // writes encoded bytes as they are.
    return pending
      .then(
        (response) =>
          encodeModelInferResponse(encodeInferResponse(response, sharedOutputs)) as ModelInferResponseMessage,
      )
      .finally(() => {
        call.off("cancelled", onCancel);
        sharedOutputs?.use.release();
      });
  };

  const implementation = {
    // A stopping server is neither: Triton answers both UNAVAILABLE "Server exiting".
    ServerLive: unary(logger, "ServerLive", () => {
      if (context.isExiting?.() === true) throw unavailable(SERVER_EXITING);
      return { live: context.isLive() };
    }),
    ServerReady: unary(logger, "ServerReady", () => {
      if (context.isExiting?.() === true) throw unavailable(SERVER_EXITING);
      return { ready: context.isReady() };
    }),
    ModelReady: unary(logger, "ModelReady", (m: ModelRequestMessage) => {
      // As Triton's ModelIsReady: no model of a stopping server is ready.
      if (context.isExiting?.() === true) throw unavailable(SERVER_NOT_READY);
      const model = m.name ?? "";
      const ready = registry.isReady(model, modelVersion(given(m.version)));
      recordReadiness(
        context.apiCalls,
        GRPC_CALLS.ModelReady,
        registry,
        model,
        modelVersion(given(m.version)),
      );
      return { ready };
    }),
    ServerMetadata: unary(logger, "ServerMetadata", () => context.metadata),
    ModelMetadata: unary(logger, "ModelMetadata", (m: ModelRequestMessage) =>
      recordCall(context.apiCalls, GRPC_CALLS.ModelMetadata, (identify) => {
        const name = m.name ?? "";
        const metadata = registry.metadata(name, modelVersion(given(m.version)));
        // The version that answered, as the registry names it (`01` is version 1).
        identify(name, metadata.versions.at(-1));
        return metadataMessage(metadata);
      }),
    ),
    ModelInfer: unary(
      logger,
      "ModelInfer",
      (
        message: ModelInferRequestMessage,
        call: ServerUnaryCall<ModelInferRequestMessage, ModelInferResponseMessage>,
      ) =>
        recordCall(context.apiCalls, GRPC_CALLS.ModelInfer, (identify) =>
          modelInfer(message, call, identify),
        ),
    ),
    ModelStreamInfer: (call: StreamInferCall) => {
      // A bad routing header ends the call before the stream takes any share of the
      // connection's answer budget.
      let routedId: SequenceId | undefined;
      try {
        routedId = routedSequenceId(call.metadata.get(SEQUENCE_ID_METADATA)[0]?.toString());
      } catch (error) {
        call.emit("error", statusOf(error));
        return;
      }
      new StreamInferSession(call, registry, logger, {
        maxInflight: options.maxInflightPerStream,
        maxMessageBytes: options.maxMessageBytes,
        routedId,
        budget: options.budgets.acquire(call.getPeer()),
        principal: principalOf(call.metadata),
        requestOrder: call.metadata.get(STREAM_ORDER_METADATA)[0] !== "sequence",
        stallTimeoutMs: options.streamStallTimeoutMs,
        maxHeldRequestBytes: options.streamMaxHeldRequestBytes,
        refusals: options.refusals,
        sharedMemory: context.sharedMemory,
      });
    },
    ModelConfig: unary(logger, "ModelConfig", (m: ModelRequestMessage) => ({
      config: registry.configJson(m.name ?? "", modelVersion(given(m.version))),
    })),
    ModelStatistics: unary(logger, "ModelStatistics", (m: ModelRequestMessage) => ({
      model_stats: registry.statistics(given(m.name), modelVersion(given(m.version))),
    })),
    RepositoryIndex: unary(logger, "RepositoryIndex", (m: RepositoryIndexRequestMessage) => {
      if (named(m.repository_name)) throw repositoryNameRefusal();
      return {
        models: registry.index(m.ready ?? false).map(
          (entry): ModelIndexMessage => ({
            name: entry.name,
            version: entry.version ?? "",
            state: entry.state ?? "",
            reason: entry.reason ?? "",
          }),
        ),
      };
    }),
    RepositoryModelLoad: unary(logger, "RepositoryModelLoad", async (m: RepositoryModelRequestMessage) => {
      if (named(m.repository_name)) throw repositoryNameRefusal();
      const name = m.model_name ?? "";
      await registry.load(name, loadOptions(name, m.parameters));
      return {};
    }),
    RepositoryModelUnload: unary(
      logger,
      "RepositoryModelUnload",
      async (m: RepositoryModelRequestMessage) => {
        if (named(m.repository_name)) throw repositoryNameRefusal();
        checkUnloadParameters(m.parameters);
        await registry.unload(m.model_name ?? "");
        return {};
      },
    ),
    SystemSharedMemoryStatus: unary(
      logger,
      "SystemSharedMemoryStatus",
      (m: SharedMemoryNameMessage, call): SystemSharedMemoryStatusMessage => {
        const regions = sharedMemoryRegions("system shared memory");
        const listed = regions.status(given(m.name), principalOf(call.metadata));
        return {
          regions: Object.fromEntries(
            listed.map((r) => [
              r.name,
              { name: r.name, key: r.key, offset: r.offset, byte_size: r.byteSize },
            ]),
          ),
        };
      },
    ),
    SystemSharedMemoryRegister: unary(
      logger,
      "SystemSharedMemoryRegister",
      (m: SystemSharedMemoryRegisterMessage, call) => {
        const regions = sharedMemoryRegions("system shared memory");
        regions.register(
          m.name ?? "",
          m.key ?? "",
          byteCount(m.offset, "offset"),
          byteCount(m.byte_size, "byte_size"),
          principalOf(call.metadata),
        );
        return {};
      },
    ),
    SystemSharedMemoryUnregister: unary(
      logger,
      "SystemSharedMemoryUnregister",
      (m: SharedMemoryNameMessage, call) => {
        sharedMemoryRegions("system shared memory").unregister(given(m.name), principalOf(call.metadata));
        return {};
      },
    ),
    CudaSharedMemoryStatus: unary(logger, "CudaSharedMemoryStatus", (m: SharedMemoryNameMessage, call) => {
      cudaSharedMemoryStatus(
        sharedMemoryRegions("CUDA shared memory"),
        given(m.name),
        principalOf(call.metadata),
      );
      return { regions: {} };
    }),
    CudaSharedMemoryRegister: unary(logger, "CudaSharedMemoryRegister", (m: SharedMemoryNameMessage) => {
      sharedMemoryRegions("CUDA shared memory");
      return registerCudaSharedMemory(m.name ?? "");
    }),
    CudaSharedMemoryUnregister: unary(logger, "CudaSharedMemoryUnregister", () => {
      unregisterCudaSharedMemory(sharedMemoryRegions("CUDA shared memory"));
      return {};
    }),
    TraceSetting: unary(
      logger,
      "TraceSetting",
      async (m: TraceSettingRequestMessage): Promise<TraceSettingResponseMessage> => {
        const tracing = context.tracing;
        if (tracing === undefined) return unsupported("trace setting")();
        const settings = m.settings ?? {};
        const readChange =
          Object.keys(settings).length === 0
            ? undefined
            : () => {
                const values: Record<string, readonly string[]> = {};
                for (const [name, value] of Object.entries(settings)) values[name] = value.value ?? [];
                return traceSettingsChange(values);
              };
        const view = await traceSettingsRequest(
          context.registry,
          tracing,
          m.model_name || undefined,
          readChange,
        );
        const answer: Record<string, { value: string[] }> = {};
        for (const [name, value] of traceSettingsValues(view)) answer[name] = { value };
        return { settings: answer };
      },
    ),
    LogSettings: unary(logger, "LogSettings", (m: LogSettingsMessage): LogSettingsMessage => {
      const logging = context.logging;
      if (logging === undefined) return unsupported("log settings")();
      const values: Record<string, unknown> = {};
      for (const [name, value] of Object.entries(m.settings ?? {})) values[name] = settingValue(value);
      const settings =
        Object.keys(values).length === 0 ? logging.current() : logging.update(logSettingsChange(values));
      const answer: Record<string, SettingValueMessage> = {};
      for (const [name, value] of Object.entries(logSettingsWire(settings))) {
        answer[name] =
          typeof value === "boolean"
            ? { bool_param: value }
            : typeof value === "number"
              ? { uint32_param: value }
              : { string_param: value };
      }
      return { settings: answer };
    }),
  };
  return { definition: inferenceServiceDefinition(options.decodeLimit), implementation };
}
