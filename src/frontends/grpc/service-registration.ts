import type { ServiceDefinition, UntypedServiceImplementation } from "@grpc/grpc-js";

/**
 * One gRPC service the frontend serves: its definition (from the proto files) and its
 * handlers. Each protocol family (KServe v2, health, later TF-Serving) provides its own.
 */
export interface GrpcServiceRegistration {
  readonly definition: ServiceDefinition;
  readonly implementation: UntypedServiceImplementation;
}
