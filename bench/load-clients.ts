import { Agent, request } from "node:http";
import { fileURLToPath } from "node:url";
import { Client, type ClientDuplexStream, credentials } from "@grpc/grpc-js";
import protobuf from "protobufjs";

// Load generators for the Silero VAD benchmark: each keeps a fixed number of requests in
// flight for a fixed time and counts answered chunks. Every request is a real inference
// whose answer is checked for success; a failure stops the run with its message.

export const CHUNK = 512;
export const SAMPLE_RATE = 16000n;

/** Deterministic audio-like chunks (a seeded PRNG), so every run sends the same data. */
export function audioChunks(count: number, seed = 7): Float32Array[] {
  let state = seed >>> 0;
  const random = () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  return Array.from({ length: count }, () =>
    Float32Array.from({ length: CHUNK }, () => (random() - 0.5) * 0.6),
  );
}

export interface RunResult {
  readonly requests: number;
  readonly seconds: number;
}

/** Runs `workers` loops of `step` until `seconds` pass (after `warmupSeconds` not counted). */
export async function runLoops(
  workers: number,
  seconds: number,
  warmupSeconds: number,
  step: (worker: number, last: boolean) => Promise<void>,
): Promise<RunResult> {
  const start = performance.now();
  const measureFrom = start + warmupSeconds * 1000;
  const end = measureFrom + seconds * 1000;
  let counted = 0;
  let measuredStart = 0;
  await Promise.all(
    Array.from({ length: workers }, async (_, worker) => {
      for (;;) {
        const now = performance.now();
        const last = now >= end;
        await step(worker, last);
        if (now >= measureFrom && !last) {
          if (measuredStart === 0) measuredStart = now;
          counted++;
        }
        if (last) return;
      }
    }),
  );
  return { requests: counted, seconds: (end - Math.max(measureFrom, measuredStart || measureFrom)) / 1000 };
}

// ---- HTTP (KServe v2, JSON and binary extension) ----

export class HttpClient {
  readonly #agent: Agent;
  readonly #port: number;

  constructor(port: number, connections: number) {
    this.#port = port;
    this.#agent = new Agent({ keepAlive: true, maxSockets: connections });
  }

  post(
    path: string,
    headers: Record<string, string>,
    body: Buffer,
  ): Promise<{ status: number; headers: Record<string, string | string[] | undefined>; body: Buffer }> {
    return new Promise((resolve, reject) => {
      const req = request(
        {
          agent: this.#agent,
          host: "127.0.0.1",
          port: this.#port,
          path,
          method: "POST",
          headers: { ...headers, "content-length": body.byteLength },
        },
        (res) => {
          const chunks: Buffer[] = [];
          res.on("data", (c: Buffer) => chunks.push(c));
          res.on("end", () =>
            resolve({
              status: res.statusCode ?? 0,
              headers: res.headers,
              body: chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks),
            }),
          );
          res.on("error", reject);
        },
      );
      req.on("error", reject);
      req.end(body);
    });
  }

  close(): void {
    this.#agent.destroy();
  }
}

export interface BinaryTensor {
  readonly name: string;
  readonly datatype: string;
  readonly shape: readonly number[];
  readonly bytes: Uint8Array;
}

const bytesOf = (view: ArrayBufferView): Uint8Array =>
  new Uint8Array(view.buffer, view.byteOffset, view.byteLength);

export { bytesOf };

/** A binary-extension request body: the JSON header, then each input's raw bytes. */
export function binaryRequest(
  inputs: readonly BinaryTensor[],
  parameters: string,
): { body: Buffer; headerLength: number } {
  const header = Buffer.from(
    `{"parameters":{${parameters}},"inputs":[${inputs
      .map(
        (i) =>
          `{"name":"${i.name}","datatype":"${i.datatype}","shape":[${i.shape.join(",")}],"parameters":{"binary_data_size":${i.bytes.byteLength}}}`,
      )
      .join(",")}]}`,
  );
  return { body: Buffer.concat([header, ...inputs.map((i) => i.bytes)]), headerLength: header.byteLength };
}

/** The raw outputs of a binary-extension response, by name. */
export function binaryOutputs(response: {
  headers: Record<string, string | string[] | undefined>;
  body: Buffer;
}): Map<string, Buffer> {
  const headerLength = Number(response.headers["inference-header-content-length"]);
  const header = JSON.parse(response.body.subarray(0, headerLength).toString()) as {
    outputs: { name: string; parameters?: { binary_data_size?: number } }[];
  };
  const outputs = new Map<string, Buffer>();
  let offset = headerLength;
  for (const output of header.outputs) {
    const size = output.parameters?.binary_data_size ?? 0;
    outputs.set(output.name, response.body.subarray(offset, offset + size));
    offset += size;
  }
  return outputs;
}

// ---- SageMaker sessions over /invocations (Triton's SageMaker binary form) ----

const SAGEMAKER_BINARY = "application/vnd.sagemaker-triton.binary+json";
const SESSION_HEADER = "x-amzn-sagemaker-session-id";

/** Opens a session on `model` (NEW_SESSION header and body); resolves with its id. */
export async function openSession(http: HttpClient, model: string): Promise<string> {
  const res = await http.post(
    "/invocations",
    {
      "content-type": "application/json",
      [SESSION_HEADER]: "NEW_SESSION",
      "x-amzn-sagemaker-target-model": model,
    },
    Buffer.from('{"requestType":"NEW_SESSION"}'),
  );
  if (res.status !== 200) throw new Error(res.body.toString());
  return String(res.headers["x-amzn-sagemaker-new-session-id"]).split(";")[0]!;
}

/** One step of session `id`: binary inputs in, binary outputs back. */
export async function sessionStep(
  http: HttpClient,
  id: string,
  inputs: readonly BinaryTensor[],
): Promise<Buffer> {
  const { body, headerLength } = binaryRequest(inputs, "");
  const res = await http.post(
    "/invocations",
    { "content-type": `${SAGEMAKER_BINARY};json-header-size=${headerLength}`, [SESSION_HEADER]: id },
    body,
  );
  if (res.status !== 200) throw new Error(res.body.toString());
  return res.body;
}

export async function closeSession(http: HttpClient, id: string): Promise<void> {
  const res = await http.post(
    "/invocations",
    { "content-type": "application/json", [SESSION_HEADER]: id },
    Buffer.from('{"requestType":"CLOSE"}'),
  );
  if (res.status !== 200) throw new Error(res.body.toString());
}

// ---- gRPC (KServe v2 ModelInfer / ModelStreamInfer), messages encoded with protobufjs ----

const root = new protobuf.Root();
root.resolvePath = (_origin, target) =>
  fileURLToPath(new URL(`../proto/${target.replace(/^.*\//, "")}`, import.meta.url));
root.loadSync("grpc_service.proto", { keepCase: true });
const InferRequest = root.lookupType("inference.ModelInferRequest");
const InferResponse = root.lookupType("inference.ModelInferResponse");
const StreamResponse = root.lookupType("inference.ModelStreamInferResponse");

export interface GrpcInput {
  readonly name: string;
  readonly datatype: string;
  readonly shape: readonly number[];
}

export interface GrpcRequest {
  readonly model: string;
  readonly id: string;
  readonly inputs: readonly GrpcInput[];
  readonly raw: readonly Uint8Array[];
  readonly sequenceId: bigint;
  readonly start: boolean;
  readonly end: boolean;
}

export function encodeGrpcRequest(r: GrpcRequest): Uint8Array {
  return InferRequest.encode({
    model_name: r.model,
    id: r.id,
    parameters: {
      // int64 fields take a decimal string; the uint64 id travels as its int64 bit pattern.
      sequence_id: { int64_param: BigInt.asIntN(64, r.sequenceId).toString() },
      sequence_start: { bool_param: r.start },
      sequence_end: { bool_param: r.end },
    },
    inputs: r.inputs.map((i) => ({ name: i.name, datatype: i.datatype, shape: i.shape })),
    raw_input_contents: r.raw,
  }).finish();
}

interface DecodedResponse {
  readonly id: string;
  readonly raw_output_contents: Uint8Array[];
}

const passthrough = (bytes: Uint8Array): Buffer =>
  Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);

export class GrpcClient {
  readonly #client: Client;

  constructor(port: number) {
    this.#client = new Client(`127.0.0.1:${port}`, credentials.createInsecure(), {
      "grpc.max_receive_message_length": -1,
      "grpc.max_send_message_length": -1,
    });
  }

  infer(encoded: Uint8Array): Promise<DecodedResponse> {
    return new Promise((resolve, reject) => {
      this.#client.makeUnaryRequest(
        "/inference.GRPCInferenceService/ModelInfer",
        (b: Uint8Array) => passthrough(b),
        (b: Buffer) => InferResponse.decode(b) as unknown as DecodedResponse,
        encoded,
        (error, response) => (error ? reject(error) : resolve(response!)),
      );
    });
  }

  /** A ModelStreamInfer stream; `onResponse` gets each answer (or throws on an in-band error). */
  stream(onResponse: (response: DecodedResponse) => void): ClientDuplexStream<Uint8Array, DecodedResponse> {
    const call = this.#client.makeBidiStreamRequest(
      "/inference.GRPCInferenceService/ModelStreamInfer",
      (b: Uint8Array) => passthrough(b),
      (b: Buffer) => {
        const message = StreamResponse.decode(b) as unknown as {
          error_message: string;
          infer_response?: DecodedResponse;
        };
        if (message.error_message !== "") throw new Error(message.error_message);
        return message.infer_response!;
      },
    );
    call.on("data", onResponse);
    return call;
  }

  close(): void {
    this.#client.close();
  }
}
