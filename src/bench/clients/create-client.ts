import type { BenchClient, ClientTarget, Protocol } from "./bench-client.ts";
import { KserveGrpcClient, KserveStreamClient, TfsGrpcClient } from "./grpc-clients.ts";
import { KserveBinaryClient, KserveJsonClient, SageMakerClient, TfsRestClient } from "./http-clients.ts";
import { WsStreamClient } from "./ws-client.ts";

export function createClient(protocol: Protocol, target: ClientTarget): BenchClient {
  switch (protocol) {
    case "http-json":
      return new KserveJsonClient(target);
    case "http-binary":
      return new KserveBinaryClient(target);
    case "grpc":
      return new KserveGrpcClient(target);
    case "grpc-stream":
      return new KserveStreamClient(target);
    case "ws":
      return new WsStreamClient(target);
    case "tfs-grpc":
      return new TfsGrpcClient(target);
    case "tfs-rest":
      return new TfsRestClient(target);
    case "sagemaker":
      return new SageMakerClient(target);
    case "sagemaker-stream":
      return new SageMakerClient(target, { responseStream: true });
  }
}
