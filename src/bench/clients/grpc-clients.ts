import {
  Client,
  type ClientDuplexStream,
  credentials,
  InterceptingCall,
  type Interceptor,
  Metadata,
  type ServiceError,
  status,
} from "@grpc/grpc-js";
import type protobuf from "protobufjs";
import type { DataType } from "../../core/datatype.ts";
import type { Tensor } from "../../core/tensor.ts";
import { decodeRawTensor, encodeRawTensor } from "../../frontends/common/raw-tensor.ts";
import { inferenceTypes } from "../../frontends/grpc/proto-definitions.ts";
import type { TensorProtoMessage, TensorProtoToEncode } from "../../frontends/tfs/messages.ts";
import { tfsTypes } from "../../frontends/tfs/proto-definitions.ts";
import { decodeTensorProto, encodeTensorProto } from "../../frontends/tfs/tensor-proto.ts";
import {
  authority,
  type BenchClient,
  type BenchSequence,
  type ClientTarget,
  required,
  STEP_TIMEOUT_MS,
  StepError,
  type StepFlags,
  timedOut,
} from "./bench-client.ts";

// The gRPC protocols: KServe v2 ModelInfer (unary) and ModelStreamInfer (sequences spread
// over a few bidirectional streams, answers matched by request id), and TF-Serving's
// Predict with OpenVINO Model Server's special inputs. Messages are encoded with
// protobufjs from seqserve's own protos (field for field Triton's and TF-Serving's).

interface DecodedInferResponse {
  readonly id: string;
  /** A decoupled model's responses carry `triton_final_response`. */
  readonly parameters?: Record<string, { bool_param?: boolean }>;
  readonly outputs: { name: string; datatype: DataType; shape: (number | { toNumber(): number })[] }[];
  readonly raw_output_contents: Uint8Array[];
}

const passthrough = (bytes: Uint8Array): Buffer =>
  Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);

function encodeInfer(
  type: protobuf.Type,
  model: string,
  id: string,
  sequence: BenchSequence,
  flags: StepFlags,
  inputs: ReadonlyMap<string, Tensor>,
  decoupled = false,
): Uint8Array {
  const parameters: Record<string, unknown> = {};
  // A decoupled request may send no response: the empty final one says it is done.
  if (decoupled) parameters.triton_enable_empty_final_response = { bool_param: true };
  if (sequence.id !== undefined) {
    // The uint64 id travels as its int64 bit pattern, as Triton's clients send it.
    parameters.sequence_id = { int64_param: BigInt.asIntN(64, sequence.id).toString() };
    if (flags.start) parameters.sequence_start = { bool_param: true };
    if (flags.end) parameters.sequence_end = { bool_param: true };
    if (flags.step !== undefined) parameters.sequence_step = { int64_param: String(flags.step) };
  }
  const described: object[] = [];
  const raw: Uint8Array[] = [];
  for (const [name, tensor] of inputs) {
    described.push({ name, datatype: tensor.datatype, shape: tensor.shape });
    raw.push(encodeRawTensor(tensor));
  }
  return type
    .encode({ model_name: model, id, parameters, inputs: described, raw_input_contents: raw })
    .finish();
}

function outputsOf(response: DecodedInferResponse): Map<string, Tensor> {
  const outputs = new Map<string, Tensor>();
  response.outputs.forEach((o, i) => {
    const shape = o.shape.map((d) => (typeof d === "number" ? d : d.toNumber()));
    outputs.set(
      o.name,
      decodeRawTensor(o.name, o.datatype, shape, response.raw_output_contents[i] ?? new Uint8Array()),
    );
  });
  return outputs;
}

/** The metadata a load balancer hashes on to keep a sequence on one replica. */
function routing(sequence: BenchSequence): Metadata {
  const metadata = new Metadata();
  if (sequence.id !== undefined) metadata.set("sequence-id", sequence.id.toString());
  return metadata;
}

const failure = (error: ServiceError): StepError =>
  new StepError(`grpc ${status[error.code]}`, error.details);

/** A unary call's deadline: a server that stops answering fails the step, as on the streams. */
const unaryDeadline = (target: ClientTarget) => {
  const timeoutMs = target.stepTimeoutMs ?? STEP_TIMEOUT_MS;
  return {
    options: () => ({ deadline: Date.now() + timeoutMs }),
    failure: (error: ServiceError): StepError =>
      error.code === status.DEADLINE_EXCEEDED ? timedOut(timeoutMs) : failure(error),
  };
};

/** Adds `headers` to every call's metadata. */
function withHeaders(headers: Readonly<Record<string, string>>): Interceptor {
  return (options, nextCall) =>
    new InterceptingCall(nextCall(options), {
      start(metadata, listener, next) {
        for (const [name, value] of Object.entries(headers)) metadata.set(name, value);
        next(metadata, listener);
      },
    });
}

function channel(target: ClientTarget): Client {
  return new Client(authority(required(target.grpc, "gRPC")), credentials.createInsecure(), {
    "grpc.max_receive_message_length": -1,
    "grpc.max_send_message_length": -1,
    ...(target.headers === undefined ? {} : { interceptors: [withHeaders(target.headers)] }),
  });
}

export class KserveGrpcClient implements BenchClient {
  readonly #client: Client;
  readonly #model: string;
  readonly #deadline: ReturnType<typeof unaryDeadline>;
  readonly #request = inferenceTypes().lookupType("inference.ModelInferRequest");
  readonly #response = inferenceTypes().lookupType("inference.ModelInferResponse");
  #next = 0;

  constructor(target: ClientTarget) {
    this.#client = channel(target);
    this.#model = target.model;
    this.#deadline = unaryDeadline(target);
  }

  step(
    sequence: BenchSequence,
    inputs: ReadonlyMap<string, Tensor>,
    flags: StepFlags,
  ): Promise<Map<string, Tensor>> {
    const encoded = encodeInfer(this.#request, this.#model, String(this.#next++), sequence, flags, inputs);
    return new Promise((resolve, reject) => {
      this.#client.makeUnaryRequest(
        "/inference.GRPCInferenceService/ModelInfer",
        passthrough,
        (b: Buffer) => this.#response.decode(b) as unknown as DecodedInferResponse,
        encoded,
        routing(sequence),
        this.#deadline.options(),
        (error, response) => (error ? reject(this.#deadline.failure(error)) : resolve(outputsOf(response!))),
      );
    });
  }

  async close(): Promise<void> {
    this.#client.close();
  }
}

interface Waiter {
  readonly resolve: (outputs: Map<string, Tensor>) => void;
  readonly reject: (error: Error) => void;
  /** A decoupled request's latest response with outputs, until its final response. */
  outputs?: Map<string, Tensor>;
}

interface StreamMessage {
  error_message: string;
  infer_response?: DecodedInferResponse;
}

/** One ModelStreamInfer call and the requests it carries that are not answered yet. */
interface Stream {
  readonly call: ClientDuplexStream<Uint8Array, StreamMessage>;
  readonly waiting: Map<string, Waiter>;
  /** False once the call has ended, however: its slot then gets a new call. */
  open: boolean;
}

/** Sequences over `streams` ModelStreamInfer calls: sequence i always on stream i mod streams. */
export class KserveStreamClient implements BenchClient {
  readonly #client: Client;
  readonly #model: string;
  readonly #request = inferenceTypes().lookupType("inference.ModelInferRequest");
  readonly #streamResponse = inferenceTypes().lookupType("inference.ModelStreamInferResponse");
  readonly #streams: Stream[] = [];
  readonly #decoupled: boolean;
  readonly #timeoutMs: number;
  #next = 0;

  constructor(target: ClientTarget) {
    this.#client = channel(target);
    this.#model = target.model;
    this.#decoupled = target.decoupled ?? false;
    this.#timeoutMs = target.stepTimeoutMs ?? STEP_TIMEOUT_MS;
    for (let s = 0; s < Math.max(1, target.streams); s++) this.#streams.push(this.#open());
  }

  #open(): Stream {
    // Answers are matched by request id: they may come as they complete.
    const metadata = new Metadata();
    metadata.set("seqserve-stream-order", "sequence");
    const call = this.#client.makeBidiStreamRequest(
      "/inference.GRPCInferenceService/ModelStreamInfer",
      passthrough,
      (b: Buffer) => this.#streamResponse.decode(b) as unknown as StreamMessage,
      metadata,
    );
    const stream: Stream = { call, waiting: new Map(), open: true };
    call.on("data", (message: StreamMessage) => {
      const id = message.infer_response?.id ?? "";
      const waiter = stream.waiting.get(id);
      if (waiter === undefined) return;
      if (message.error_message !== "") {
        stream.waiting.delete(id);
        waiter.reject(new StepError("stream error", message.error_message));
        return;
      }
      const response = message.infer_response!;
      const outputs = outputsOf(response);
      // A decoupled request is answered at its final response (the empty one it asked for
      // when the model's last did not say it was the last); its outputs are the last sent.
      if (this.#decoupled) {
        if (outputs.size > 0) waiter.outputs = outputs;
        if (response.parameters?.triton_final_response?.bool_param !== true) return;
      }
      stream.waiting.delete(id);
      waiter.resolve(waiter.outputs ?? outputs);
    });
    // A call the server ends, with an error or without, fails what it still carries (its
    // lanes go on with new sequences on a new call) rather than leaving them waiting.
    const ended = (error: StepError) => {
      stream.open = false;
      for (const waiter of stream.waiting.values()) waiter.reject(error);
      stream.waiting.clear();
    };
    call.on("error", (error: ServiceError) => ended(failure(error)));
    call.on("status", (s: { code: number; details: string }) =>
      ended(new StepError(`grpc ${status[s.code]}`, `the stream ended: ${s.details}`)),
    );
    return stream;
  }

  step(
    sequence: BenchSequence,
    inputs: ReadonlyMap<string, Tensor>,
    flags: StepFlags,
  ): Promise<Map<string, Tensor>> {
    const id = String(this.#next++);
    const encoded = encodeInfer(this.#request, this.#model, id, sequence, flags, inputs, this.#decoupled);
    const slot = sequence.index % this.#streams.length;
    if (!this.#streams[slot]!.open) this.#streams[slot] = this.#open();
    const stream = this.#streams[slot]!;
    return new Promise<Map<string, Tensor>>((resolve, reject) => {
      // Answers are matched by id: one that comes after its step timed out finds no waiter.
      const timer = setTimeout(() => {
        stream.waiting.delete(id);
        reject(timedOut(this.#timeoutMs));
      }, this.#timeoutMs);
      const settled =
        <T>(settle: (value: T) => void) =>
        (value: T) => {
          clearTimeout(timer);
          settle(value);
        };
      stream.waiting.set(id, { resolve: settled(resolve), reject: settled(reject) });
      stream.call.write(encoded);
    });
  }

  async close(): Promise<void> {
    await Promise.all(
      this.#streams
        .filter((stream) => stream.open)
        .map(
          ({ call }) =>
            new Promise<void>((resolve) => {
              call.once("status", () => resolve());
              call.once("error", () => resolve());
              call.end();
            }),
        ),
    );
    this.#client.close();
  }
}

const DT_UINT32 = 22;

/** TF-Serving Predict, OVMS's special inputs `sequence_id` (uint64_val) and `sequence_control_input` (uint32_val). */
export class TfsGrpcClient implements BenchClient {
  readonly #client: Client;
  readonly #model: string;
  readonly #request = tfsTypes().lookupType("tensorflow.serving.PredictRequest");
  readonly #response = tfsTypes().lookupType("tensorflow.serving.PredictResponse");
  readonly #deadline: ReturnType<typeof unaryDeadline>;

  constructor(target: ClientTarget) {
    this.#client = channel(target);
    this.#model = target.model;
    this.#deadline = unaryDeadline(target);
  }

  step(
    sequence: BenchSequence,
    inputs: ReadonlyMap<string, Tensor>,
    flags: StepFlags,
  ): Promise<Map<string, Tensor>> {
    const protos: Record<string, TensorProtoToEncode> = {};
    for (const [name, tensor] of inputs) protos[name] = encodeTensorProto(tensor);
    if (sequence.id !== undefined) {
      protos.sequence_id = {
        dtype: 23,
        tensor_shape: { dim: [{ size: 1 }] },
        uint64_val: [sequence.id.toString()],
      };
      if (flags.step !== undefined) {
        protos.sequence_step = {
          dtype: 23,
          tensor_shape: { dim: [{ size: 1 }] },
          uint64_val: [String(flags.step)],
        };
      }
      const control = flags.start ? 1 : flags.end ? 2 : 0;
      if (control !== 0) {
        protos.sequence_control_input = {
          dtype: DT_UINT32,
          tensor_shape: { dim: [{ size: 1 }] },
          uint32_val: [control],
        };
      }
    }
    const encoded = this.#request.encode({ model_spec: { name: this.#model }, inputs: protos }).finish();
    return new Promise((resolve, reject) => {
      this.#client.makeUnaryRequest(
        "/tensorflow.serving.PredictionService/Predict",
        passthrough,
        (b: Buffer) => this.#response.decode(b) as unknown as { outputs: Record<string, TensorProtoMessage> },
        encoded,
        routing(sequence),
        this.#deadline.options(),
        (error, response) => {
          if (error) return reject(this.#deadline.failure(error));
          const outputs = new Map<string, Tensor>();
          for (const [name, proto] of Object.entries(response!.outputs)) {
            if (name !== "sequence_id") outputs.set(name, decodeTensorProto(name, proto));
          }
          resolve(outputs);
        },
      );
    });
  }

  async close(): Promise<void> {
    this.#client.close();
  }
}
