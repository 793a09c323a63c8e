import {
  Metadata,
  ServerInterceptingCall,
  type ServerInterceptingCallInterface,
  type ServerInterceptor,
} from "@grpc/grpc-js";
import type { ApiGroup } from "../../config/security-options.ts";
import type { AccessPolicy } from "../common/access/access-policy.ts";
import { statusOf } from "./error-status.ts";
import { statusTableOf } from "./service-status-table.ts";

// Access control for every gRPC service, before a call's first message is read: the
// method's API group (Triton's restricted-protocol categories) is checked against the
// access policy from the call's metadata. A refused call ends with UNAUTHENTICATED or
// PERMISSION_DENIED; an accepted one's caller is known to its handler by its metadata
// (principalOf), which the client cannot forge: the name is kept beside the metadata
// object, not in it.

const SERVICES: Readonly<Record<string, Readonly<Record<string, ApiGroup>> | ApiGroup>> = {
  "inference.GRPCInferenceService": {
    ServerLive: "health",
    ServerReady: "health",
    ModelReady: "health",
    ServerMetadata: "metadata",
    ModelMetadata: "metadata",
    ModelInfer: "inference",
    ModelStreamInfer: "inference",
    ModelConfig: "model-config",
    ModelStatistics: "statistics",
    RepositoryIndex: "model-repository",
    RepositoryModelLoad: "model-repository",
    RepositoryModelUnload: "model-repository",
    SystemSharedMemoryStatus: "shared-memory",
    SystemSharedMemoryRegister: "shared-memory",
    SystemSharedMemoryUnregister: "shared-memory",
    CudaSharedMemoryStatus: "shared-memory",
    CudaSharedMemoryRegister: "shared-memory",
    CudaSharedMemoryUnregister: "shared-memory",
    TraceSetting: "trace",
    LogSettings: "logging",
  },
  "grpc.health.v1.Health": "health",
  "tensorflow.serving.PredictionService": {
    Predict: "inference",
    GetModelMetadata: "metadata",
    Classify: "inference",
    Regress: "inference",
    MultiInference: "inference",
  },
  "tensorflow.serving.ModelService": {
    GetModelStatus: "health",
    HandleReloadConfigRequest: "model-repository",
  },
};

/** The API group of a method path ("/package.Service/Method"); unknown methods count as inference. */
function methodApiGroup(path: string): ApiGroup {
  const [, service = "", method = ""] = path.split("/");
  const groups = SERVICES[service];
  if (groups === undefined) return "inference";
  return typeof groups === "string" ? groups : (groups[method] ?? "inference");
}

const principals = new WeakMap<Metadata, string>();

/** The caller of a call whose metadata passed the access check (its API key's name). */
export function principalOf(metadata: Metadata): string | undefined {
  return principals.get(metadata);
}

function lookup(metadata: Metadata): (name: string) => string | undefined {
  return (name) => {
    const values = metadata.get(name);
    const value = values[0];
    return typeof value === "string" ? value : value === undefined ? undefined : value.toString("utf8");
  };
}

export function accessInterceptor(policy: AccessPolicy): ServerInterceptor {
  return (method, call: ServerInterceptingCallInterface) =>
    new ServerInterceptingCall(call, {
      start: (next) => {
        next({
          onReceiveMetadata: (metadata, pass) => {
            let principal: string | undefined;
            try {
              principal = policy.check(methodApiGroup(method.path), lookup(metadata));
            } catch (error) {
              const refusal = statusOf(error, statusTableOf(method.path));
              call.sendStatus({ ...refusal, metadata: refusal.metadata ?? new Metadata() });
              return;
            }
            if (principal !== undefined) principals.set(metadata, principal);
            pass(metadata);
          },
        });
      },
    });
}
