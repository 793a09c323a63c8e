import { type ChannelOptions, Client, credentials, type ServiceError } from "@grpc/grpc-js";
import type { MethodDefinition } from "@grpc/proto-loader";
import {
  MODEL_SERVICE_NAME,
  PREDICTION_SERVICE_NAME,
  tfsPackageDefinition,
} from "../../../src/frontends/tfs/proto-definitions.ts";

// A grpc-js client of TF-Serving's PredictionService and ModelService, built with
// proto-loader from the proto files (the same field numbers as TF-Serving's and
// TensorFlow's), and builders for the TensorProtos a TensorFlow client sends: values in
// tensor_content as make_tensor_proto writes numeric arrays, the special inputs in
// uint64_val / uint32_val as the OVMS guide's client sends them.

type Method = MethodDefinition<object, object>;

function method(service: string, name: string): Method {
  const found = (tfsPackageDefinition()[service] as Record<string, Method> | undefined)?.[name];
  if (found === undefined) throw new Error(`no method ${service}/${name}`);
  return found;
}

/** A TensorProto as proto-loader writes it (enums by name, 64-bit integers as strings). */
export type TensorProtoJs = Record<string, unknown>;

export interface PredictResponseJs {
  readonly model_spec: { readonly name: string; readonly version?: { readonly value: string } };
  readonly outputs: Readonly<
    Record<string, TensorProtoJs & { tensor_content?: Buffer; uint64_val?: string[] }>
  >;
}

export class TfsClient {
  readonly #client: Client;

  constructor(port: number, options: ChannelOptions = {}) {
    this.#client = new Client(`127.0.0.1:${port}`, credentials.createInsecure(), {
      "grpc.max_receive_message_length": -1,
      ...options,
    });
  }

  call<Response>(service: string, name: string, request: object): Promise<Response> {
    const m = method(service, name);
    return new Promise<Response>((resolve, reject) => {
      this.#client.makeUnaryRequest(
        m.path,
        m.requestSerialize,
        m.responseDeserialize,
        request,
        (error: ServiceError | null, value?: object) => (error ? reject(error) : resolve(value as Response)),
      );
    });
  }

  predict(request: object): Promise<PredictResponseJs> {
    return this.call<PredictResponseJs>(PREDICTION_SERVICE_NAME, "Predict", request);
  }

  metadata<Response>(request: object): Promise<Response> {
    return this.call<Response>(PREDICTION_SERVICE_NAME, "GetModelMetadata", request);
  }

  status<Response>(request: object): Promise<Response> {
    return this.call<Response>(MODEL_SERVICE_NAME, "GetModelStatus", request);
  }

  close(): void {
    this.#client.close();
  }
}

const shapeOf = (dims: readonly number[]) => ({ dim: dims.map((size) => ({ size })) });

/** A DT_FLOAT tensor with its values in tensor_content. */
export function floatTensor(values: Float32Array, dims: readonly number[]): TensorProtoJs {
  return {
    dtype: "DT_FLOAT",
    tensor_shape: shapeOf(dims),
    tensor_content: Buffer.from(values.buffer, values.byteOffset, values.byteLength),
  };
}

/** A DT_INT64 tensor with its values in int64_val (make_tensor_proto's form for a Python int list). */
export function int64Tensor(values: readonly bigint[], dims: readonly number[]): TensorProtoJs {
  return { dtype: "DT_INT64", tensor_shape: shapeOf(dims), int64_val: values.map(String) };
}

/** OVMS's `sequence_id` input: DT_UINT64, shape [1], the id in uint64_val. */
export function sequenceIdTensor(id: bigint): TensorProtoJs {
  return { dtype: "DT_UINT64", tensor_shape: shapeOf([1]), uint64_val: [id.toString()] };
}

/** OVMS's `sequence_control_input`: DT_UINT32, shape [1], 1 start / 2 end, in uint32_val. */
export function controlTensor(value: number): TensorProtoJs {
  return { dtype: "DT_UINT32", tensor_shape: shapeOf([1]), uint32_val: [value] };
}

/** The id of a response's `sequence_id` output (uint64_val[0]). */
export function responseSequenceId(response: PredictResponseJs): bigint {
  const id = response.outputs.sequence_id?.uint64_val?.[0];
  if (id === undefined)
    throw new Error(`no sequence_id output in ${JSON.stringify(Object.keys(response.outputs))}`);
  return BigInt(id);
}

/** An FP32 output's values (tensor_content). */
export function floatOutput(response: PredictResponseJs, name: string): Float32Array {
  const content = response.outputs[name]?.tensor_content;
  if (content === undefined) throw new Error(`no output '${name}' with tensor_content`);
  const copy = Buffer.from(content);
  return new Float32Array(copy.buffer, copy.byteOffset, copy.byteLength / 4);
}
