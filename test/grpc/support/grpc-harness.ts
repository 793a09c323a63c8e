import {
  type ChannelCredentials,
  type ChannelOptions,
  Client,
  type ClientDuplexStream,
  type ClientReadableStream,
  type ClientUnaryCall,
  credentials,
  Metadata,
  type ServiceError,
} from "@grpc/grpc-js";
import type { MethodDefinition } from "@grpc/proto-loader";
import {
  createGrpcFrontend,
  type GrpcFrontend,
  type GrpcFrontendOptions,
} from "../../../src/frontends/grpc/grpc-frontend.ts";
import type {
  ModelInferRequestMessage,
  ModelStreamInferResponseMessage,
} from "../../../src/frontends/grpc/messages.ts";
import {
  HEALTH_SERVICE_NAME,
  INFERENCE_SERVICE_NAME,
  packageDefinition,
} from "../../../src/frontends/grpc/proto-definitions.ts";
import { silentLogger } from "../../../src/observability/logger.ts";
import { FakeContext } from "./fake-context.ts";

// A real gRPC server on an ephemeral loopback port with the fake context, and a real
// grpc-js client built from the same proto files.

type Method = MethodDefinition<object, object>;

function method(service: string, name: string): Method {
  const definition = packageDefinition()[service] as Record<string, Method> | undefined;
  const found = definition?.[name];
  if (found === undefined) throw new Error(`no method ${service}/${name}`);
  return found;
}

export class TestClient {
  readonly #client: Client;

  constructor(
    port: number,
    options: ChannelOptions = {},
    channel: ChannelCredentials = credentials.createInsecure(),
  ) {
    this.#client = new Client(`${channel._isSecure() ? "localhost" : "127.0.0.1"}:${port}`, channel, {
      "grpc.max_receive_message_length": -1,
      "grpc.max_send_message_length": -1,
      ...options,
    });
  }

  /** A unary call and its response (for tests that cancel the call). */
  start<Response>(
    name: string,
    request: object,
    service = INFERENCE_SERVICE_NAME,
    metadata: Metadata = new Metadata(),
  ): { call: ClientUnaryCall; response: Promise<Response> } {
    const m = method(service, name);
    let call: ClientUnaryCall | undefined;
    const response = new Promise<Response>((resolve, reject) => {
      call = this.#client.makeUnaryRequest(
        m.path,
        m.requestSerialize,
        m.responseDeserialize,
        request,
        metadata,
        (error: ServiceError | null, value?: object) => (error ? reject(error) : resolve(value as Response)),
      );
    });
    return { call: call as ClientUnaryCall, response };
  }

  unary<Response>(
    name: string,
    request: object = {},
    service = INFERENCE_SERVICE_NAME,
    metadata?: Metadata,
  ): Promise<Response> {
    return this.start<Response>(name, request, service, metadata).response;
  }

  health<Response>(name: string, request: object = {}): Promise<Response> {
    return this.unary<Response>(name, request, HEALTH_SERVICE_NAME);
  }

  watchHealth(request: object): ClientReadableStream<object> {
    const m = method(HEALTH_SERVICE_NAME, "Watch");
    return this.#client.makeServerStreamRequest(m.path, m.requestSerialize, m.responseDeserialize, request);
  }

  /** A ModelStreamInfer call, with `metadata` (e.g. the sequence-id a balancer routes by). */
  stream(
    metadata: Metadata = new Metadata(),
  ): ClientDuplexStream<ModelInferRequestMessage, ModelStreamInferResponseMessage> {
    const m = method(INFERENCE_SERVICE_NAME, "ModelStreamInfer");
    return this.#client.makeBidiStreamRequest(
      m.path,
      m.requestSerialize,
      m.responseDeserialize,
      metadata,
    ) as ClientDuplexStream<ModelInferRequestMessage, ModelStreamInferResponseMessage>;
  }

  close(): void {
    this.#client.close();
  }
}

export interface Harness {
  readonly context: FakeContext;
  readonly frontend: GrpcFrontend;
  readonly port: number;
  readonly client: TestClient;
  stop(): Promise<void>;
}

export async function startServer(
  options: Partial<Omit<GrpcFrontendOptions, "context" | "logger">> = {},
): Promise<Harness> {
  const context = new FakeContext();
  const frontend = createGrpcFrontend({ context, logger: silentLogger(), ...options });
  const port = await frontend.listen("127.0.0.1", 0);
  const client = new TestClient(port);
  return {
    context,
    frontend,
    port,
    client,
    async stop() {
      client.close();
      await frontend.close(0);
    },
  };
}

/** Rejects with the ServiceError a call ended with; fails if the call succeeded. */
export async function callError(promise: Promise<unknown>): Promise<ServiceError> {
  try {
    await promise;
  } catch (error) {
    return error as ServiceError;
  }
  throw new Error("the call succeeded, an error was expected");
}
