import { Client, credentials } from "@grpc/grpc-js";
import { tfsTypes } from "../src/frontends/tfs/proto-definitions.ts";

// The TF-Serving Predict load of the benchmark, as an OpenVINO Model Server client sends
// it: TensorProtos with the audio in tensor_content, `sr` in int64_val, the special inputs
// `sequence_id` (uint64_val) and `sequence_control_input` (uint32_val: 1 start, 2 end).
// Requests are encoded once here and sent as bytes; answers are decoded and checked.

const PredictRequest = tfsTypes().lookupType("tensorflow.serving.PredictRequest");
const PredictResponse = tfsTypes().lookupType("tensorflow.serving.PredictResponse");

const DT_FLOAT = 1;
const DT_INT64 = 9;
const DT_UINT32 = 22;
const DT_UINT64 = 23;

export interface TfsStep {
  readonly model: string;
  readonly audio: Uint8Array;
  readonly samples: number;
  readonly sampleRate: bigint;
  readonly sequenceId: bigint;
  /** 0 none, 1 start, 2 end. */
  readonly control: number;
}

const dims = (...sizes: number[]) => ({ dim: sizes.map((size) => ({ size })) });

export function encodePredict(step: TfsStep): Uint8Array {
  return PredictRequest.encode({
    model_spec: { name: step.model },
    inputs: {
      input: { dtype: DT_FLOAT, tensor_shape: dims(1, step.samples), tensor_content: step.audio },
      sr: { dtype: DT_INT64, tensor_shape: dims(), int64_val: [step.sampleRate.toString()] },
      sequence_id: { dtype: DT_UINT64, tensor_shape: dims(1), uint64_val: [step.sequenceId.toString()] },
      ...(step.control === 0
        ? {}
        : {
            sequence_control_input: { dtype: DT_UINT32, tensor_shape: dims(1), uint32_val: [step.control] },
          }),
    },
  }).finish();
}

/** The step's JSON body for REST :predict (column form). */
export function predictJson(step: TfsStep, audio: Float32Array): string {
  const control = step.control === 0 ? "" : `,"sequence_control_input":[${step.control}]`;
  return `{"inputs":{"input":[[${audio.join(",")}]],"sr":${step.sampleRate},"sequence_id":[${step.sequenceId}]${control}}}`;
}

export class TfsGrpcClient {
  readonly #client: Client;

  constructor(port: number) {
    this.#client = new Client(`127.0.0.1:${port}`, credentials.createInsecure(), {
      "grpc.max_receive_message_length": -1,
    });
  }

  predict(encoded: Uint8Array): Promise<void> {
    return new Promise((resolve, reject) => {
      this.#client.makeUnaryRequest(
        "/tensorflow.serving.PredictionService/Predict",
        (b: Uint8Array) => Buffer.from(b.buffer, b.byteOffset, b.byteLength),
        (b: Buffer) => PredictResponse.decode(b),
        encoded,
        (error) => (error ? reject(error) : resolve()),
      );
    });
  }

  close(): void {
    this.#client.close();
  }
}
