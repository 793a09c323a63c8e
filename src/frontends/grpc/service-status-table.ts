import { KSERVE_GRPC_STATUS } from "../common/kserve/error-status.ts";
import { TFS_GRPC_STATUS } from "../tfs/error-status.ts";
import { MODEL_SERVICE_NAME, PREDICTION_SERVICE_NAME } from "../tfs/proto-definitions.ts";
import type { GrpcStatusTable } from "./error-status.ts";

// One gRPC server serves both families: KServe v2's GRPCInferenceService (and the gRPC
// health service beside it) and TF-Serving's PredictionService and ModelService. The
// server's own refusals (access control, the byte limits of its interceptors and of
// partial messages) come before a call reaches its service, and take their codes from the
// table of the family whose method was called.

const TFS_SERVICES = [PREDICTION_SERVICE_NAME, MODEL_SERVICE_NAME].map((name) => `/${name}/`);

/** The status table of the family that serves `methodPath` (`/<package>.<Service>/<Method>`). */
export function statusTableOf(methodPath: string): GrpcStatusTable {
  return TFS_SERVICES.some((service) => methodPath.startsWith(service))
    ? TFS_GRPC_STATUS
    : KSERVE_GRPC_STATUS;
}
