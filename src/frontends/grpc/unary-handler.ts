import type { handleUnaryCall, ServerUnaryCall } from "@grpc/grpc-js";
import type { Logger } from "../../observability/logger.ts";
import { KSERVE_GRPC_STATUS } from "../common/kserve/error-status.ts";
import { type GrpcStatusTable, statusOf } from "./error-status.ts";

/** What a unary handler computes; throwing (or rejecting) ends the call with a status. */
export type UnaryFunction<Request, Response> = (
  request: Request,
  call: ServerUnaryCall<Request, Response>,
) => Response | Promise<Response>;

/**
 * A grpc-js unary handler around a function that returns the response or throws a
 * ServerError; errors become statuses through the family's table (`table`: KServe's unless
 * given). Failures the client did not cause (INTERNAL, UNKNOWN) are logged.
 */
export function unary<Request, Response>(
  logger: Logger,
  method: string,
  fn: UnaryFunction<Request, Response>,
  table: GrpcStatusTable = KSERVE_GRPC_STATUS,
): handleUnaryCall<Request, Response> {
  return (call, callback) => {
    const fail = (error: unknown): void => {
      const status = statusOf(error, table);
      if (status.code === table.INTERNAL || status.code === table.UNKNOWN) {
        logger.error({ err: error, method }, "gRPC call failed");
      } else {
        logger.debug({ method, code: status.code, details: status.details }, "gRPC call refused");
      }
      callback(status);
    };
    try {
      const result = fn(call.request, call);
      if (result instanceof Promise) {
        result.then((response) => callback(null, response), fail);
      } else {
        callback(null, result);
      }
    } catch (error) {
      fail(error);
    }
  };
}
