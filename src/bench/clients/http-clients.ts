import { Agent, request } from "node:http";
import type { DataType } from "../../core/datatype.ts";
import type { Tensor } from "../../core/tensor.ts";
import {
  decodeJsonTensor,
  jsonTensorData,
  nestedJsonTensorData,
} from "../../frontends/common/kserve/json-tensor.ts";
import { decodeRawTensor, encodeRawTensor } from "../../frontends/common/raw-tensor.ts";
import { readEventStream } from "../../frontends/sagemaker/streamed-answer.ts";
import {
  type BenchClient,
  type BenchSequence,
  type ClientTarget,
  type Endpoint,
  required,
  STEP_TIMEOUT_MS,
  StepError,
  type StepFlags,
  timedOut,
} from "./bench-client.ts";

// The HTTP protocols: KServe v2 JSON and binary tensors, the TF-Serving REST column form
// with OpenVINO Model Server's special inputs, and SageMaker sessions over /invocations in
// Triton's SageMaker binary form. Keep-alive connections, as many as requests in flight.

export interface Answer {
  readonly status: number;
  readonly headers: Record<string, string | string[] | undefined>;
  readonly body: Buffer;
}

class HttpConnection {
  readonly #agent: Agent;
  readonly #host: string;
  readonly #port: number;
  readonly #headers: Readonly<Record<string, string>>;
  readonly #timeoutMs: number;

  constructor(target: ClientTarget, endpoint: Endpoint) {
    this.#host = endpoint.host;
    this.#port = endpoint.port;
    this.#headers = target.headers ?? {};
    this.#timeoutMs = target.stepTimeoutMs ?? STEP_TIMEOUT_MS;
    this.#agent = new Agent({ keepAlive: true, maxSockets: target.concurrency });
  }

  post(path: string, headers: Record<string, string>, body: Buffer): Promise<Answer> {
    return new Promise((resolve, reject) => {
      const req = request(
        {
          agent: this.#agent,
          host: this.#host,
          port: this.#port,
          path,
          method: "POST",
          headers: { ...this.#headers, ...headers, "content-length": body.byteLength },
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
      // A server that stops answering fails the step, as on the streams, instead of
      // holding its lane (and the run) for ever.
      req.setTimeout(this.#timeoutMs, () => req.destroy(timedOut(this.#timeoutMs)));
      req.on("error", (error) =>
        reject(error instanceof StepError ? error : new StepError("connection", error.message)),
      );
      req.end(body);
    });
  }

  close(): void {
    this.#agent.destroy();
  }
}

interface ErrorBody {
  readonly error?: string;
  /** A ModelError's (SageMaker's runtime API): the container's status and body. */
  readonly OriginalStatusCode?: unknown;
  readonly OriginalMessage?: unknown;
}

/**
 * `answer` when it succeeded, else a StepError of kind `http <status>` with the server's
 * message; a ModelError (SageMaker's runtime path) counts as the container's status.
 */
export function check(answer: Answer): Answer {
  if (answer.status === 200) return answer;
  let status = answer.status;
  let message = answer.body.toString("utf8");
  try {
    let body = JSON.parse(message) as ErrorBody;
    if (typeof body.OriginalStatusCode === "number" && typeof body.OriginalMessage === "string") {
      status = body.OriginalStatusCode;
      message = body.OriginalMessage;
      body = JSON.parse(message) as ErrorBody;
    }
    message = body.error ?? message;
  } catch {}
  throw new StepError(`http ${status}`, message);
}

const quote = JSON.stringify;

// An input's JSON text, kept with its tensor: the workload sends the same tensors again
// (workload.ts), and formatting their floats was most of this client's work.
const kserveTexts = new WeakMap<Tensor, string>();
const tfsTexts = new WeakMap<Tensor, string>();

function kept(texts: WeakMap<Tensor, string>, tensor: Tensor, make: () => string): string {
  let text = texts.get(tensor);
  if (text === undefined) {
    text = make();
    texts.set(tensor, text);
  }
  return text;
}

/** KServe sequence parameters as JSON members (no braces). */
function sequenceMembers(sequence: BenchSequence, flags: StepFlags): string[] {
  if (sequence.id === undefined) return [];
  const members = [`"sequence_id":${sequence.id}`];
  if (flags.start) members.push('"sequence_start":true');
  if (flags.end) members.push('"sequence_end":true');
  if (flags.step !== undefined) members.push(`"sequence_step":${flags.step}`);
  return members;
}

/** The header a load balancer hashes on to keep a sequence on one replica. */
function routing(sequence: BenchSequence): Record<string, string> {
  return sequence.id === undefined ? {} : { "x-sequence-id": sequence.id.toString() };
}

/** The binary-extension body: the JSON header (inputs with binary_data_size), then the raw tensors. */
function binaryBody(
  inputs: ReadonlyMap<string, Tensor>,
  parameters: readonly string[],
  extra = "",
): {
  body: Buffer;
  headerLength: number;
} {
  const raws: Uint8Array[] = [];
  const described: string[] = [];
  for (const [name, tensor] of inputs) {
    const raw = encodeRawTensor(tensor);
    raws.push(raw);
    described.push(
      `{"name":${quote(name)},"datatype":"${tensor.datatype}","shape":[${tensor.shape.join(",")}],"parameters":{"binary_data_size":${raw.byteLength}}}`,
    );
  }
  const header = Buffer.from(
    `{${extra}"parameters":{${parameters.join(",")}},"inputs":[${described.join(",")}]}`,
  );
  return { body: Buffer.concat([header, ...raws]), headerLength: header.byteLength };
}

/** The outputs of a binary-extension (or SageMaker binary) answer. */
function binaryOutputs(body: Buffer, headerLength: number): Map<string, Tensor> {
  const header = JSON.parse(body.subarray(0, headerLength).toString("utf8")) as {
    outputs: {
      name: string;
      datatype: DataType;
      shape: number[];
      data?: unknown;
      parameters?: { binary_data_size?: number };
    }[];
  };
  const outputs = new Map<string, Tensor>();
  let offset = headerLength;
  for (const output of header.outputs) {
    const size = output.parameters?.binary_data_size;
    if (size === undefined) {
      outputs.set(output.name, decodeJsonTensor(output.name, output.datatype, output.shape, output.data));
      continue;
    }
    outputs.set(
      output.name,
      decodeRawTensor(output.name, output.datatype, output.shape, body.subarray(offset, offset + size)),
    );
    offset += size;
  }
  return outputs;
}

function jsonOutputs(body: Buffer): Map<string, Tensor> {
  const parsed = JSON.parse(body.toString("utf8")) as {
    outputs: { name: string; datatype: DataType; shape: number[]; data: unknown }[];
  };
  const outputs = new Map<string, Tensor>();
  for (const o of parsed.outputs) outputs.set(o.name, decodeJsonTensor(o.name, o.datatype, o.shape, o.data));
  return outputs;
}

export class KserveJsonClient implements BenchClient {
  readonly #http: HttpConnection;
  readonly #path: string;

  constructor(target: ClientTarget) {
    this.#http = new HttpConnection(target, required(target.http, "HTTP"));
    this.#path = `/v2/models/${encodeURIComponent(target.model)}/infer`;
  }

  async step(
    sequence: BenchSequence,
    inputs: ReadonlyMap<string, Tensor>,
    flags: StepFlags,
  ): Promise<Map<string, Tensor>> {
    const described: string[] = [];
    for (const [name, tensor] of inputs) {
      described.push(
        kept(
          kserveTexts,
          tensor,
          () =>
            `{"name":${quote(name)},"datatype":"${tensor.datatype}","shape":[${tensor.shape.join(",")}],"data":${jsonTensorData(tensor)}}`,
        ),
      );
    }
    const body = Buffer.from(
      `{"parameters":{${sequenceMembers(sequence, flags).join(",")}},"inputs":[${described.join(",")}]}`,
    );
    const answer = check(
      await this.#http.post(this.#path, { "content-type": "application/json", ...routing(sequence) }, body),
    );
    return jsonOutputs(answer.body);
  }

  async close(): Promise<void> {
    this.#http.close();
  }
}

export class KserveBinaryClient implements BenchClient {
  readonly #http: HttpConnection;
  readonly #path: string;

  constructor(target: ClientTarget) {
    this.#http = new HttpConnection(target, required(target.http, "HTTP"));
    this.#path = `/v2/models/${encodeURIComponent(target.model)}/infer`;
  }

  async step(
    sequence: BenchSequence,
    inputs: ReadonlyMap<string, Tensor>,
    flags: StepFlags,
  ): Promise<Map<string, Tensor>> {
    const { body, headerLength } = binaryBody(inputs, [
      ...sequenceMembers(sequence, flags),
      '"binary_data_output":true',
    ]);
    const answer = check(
      await this.#http.post(
        this.#path,
        { "inference-header-content-length": String(headerLength), ...routing(sequence) },
        body,
      ),
    );
    return binaryOutputs(answer.body, Number(answer.headers["inference-header-content-length"]));
  }

  async close(): Promise<void> {
    this.#http.close();
  }
}

const SAGEMAKER_BINARY = "application/vnd.sagemaker-triton.binary+json";
const SESSION = "x-amzn-sagemaker-session-id";

/**
 * One SageMaker session per sequence: the first step opens it, the last one closes it.
 * With `responseStream`, steps go as InvokeEndpointWithResponseStream (each answer an AWS
 * event stream of one part), except a session's opening, which only InvokeEndpoint may do.
 */
export class SageMakerClient implements BenchClient {
  readonly #http: HttpConnection;
  readonly #model: string;
  readonly #responseStream: boolean;

  constructor(target: ClientTarget, options: { readonly responseStream?: boolean } = {}) {
    this.#responseStream = options.responseStream === true;
    this.#http = new HttpConnection(target, required(target.sagemaker, "SageMaker"));
    this.#model = target.model;
  }

  async step(
    sequence: BenchSequence,
    inputs: ReadonlyMap<string, Tensor>,
    flags: StepFlags,
  ): Promise<Map<string, Tensor>> {
    const stateful = sequence.id !== undefined;
    const close = stateful && flags.end && !flags.start;
    const { body, headerLength } = binaryBody(
      inputs,
      ['"binary_data_output":true'],
      close ? '"requestType":"CLOSE",' : "",
    );
    const headers: Record<string, string> = {
      "content-type": `${SAGEMAKER_BINARY};json-header-size=${headerLength}`,
      ...(flags.step === undefined
        ? {}
        : { "x-amzn-sagemaker-custom-attributes": `sequence_step=${flags.step}` }),
      "x-amzn-sagemaker-target-model": this.#model,
    };
    if (stateful) headers[SESSION] = flags.start ? "NEW_SESSION" : String(sequence.session);
    if (this.#responseStream && !(stateful && flags.start)) {
      const answer = check(
        await this.#http.post("/endpoints/bench/invocations-response-stream", headers, body),
      );
      const { parts, exception } = readEventStream(answer.body);
      if (exception !== undefined) throw new StepError(exception.type, exception.message);
      if (parts.length !== 1) throw new StepError("parts", `${parts.length} parts, where one answer was due`);
      const size = /json-header-size=(\d+)/.exec(
        String(answer.headers["x-amzn-sagemaker-content-type"]),
      )?.[1];
      return binaryOutputs(
        Buffer.from(parts[0]!.buffer, parts[0]!.byteOffset, parts[0]!.byteLength),
        Number(size),
      );
    }
    const answer = check(await this.#http.post("/invocations", headers, body));
    if (stateful && flags.start) {
      sequence.session = String(answer.headers["x-amzn-sagemaker-new-session-id"] ?? "").split(";")[0];
    }
    const size = /json-header-size=(\d+)/.exec(String(answer.headers["content-type"]))?.[1];
    return binaryOutputs(answer.body, Number(size));
  }

  async close(): Promise<void> {
    this.#http.close();
  }
}

/** TF-Serving REST :predict in column form, with OVMS's special inputs for a sequence. */
export class TfsRestClient implements BenchClient {
  readonly #http: HttpConnection;
  readonly #path: string;
  readonly #outputs: readonly string[];

  constructor(target: ClientTarget) {
    this.#http = new HttpConnection(target, required(target.http, "HTTP"));
    this.#path = `/v1/models/${encodeURIComponent(target.model)}:predict`;
    this.#outputs = target.outputs;
  }

  async step(
    sequence: BenchSequence,
    inputs: ReadonlyMap<string, Tensor>,
    flags: StepFlags,
  ): Promise<Map<string, Tensor>> {
    const members: string[] = [];
    for (const [name, tensor] of inputs) {
      members.push(kept(tfsTexts, tensor, () => `${quote(name)}:${nestedJsonTensorData(tensor)}`));
    }
    if (sequence.id !== undefined) {
      members.push(`"sequence_id":[${sequence.id}]`);
      const control = flags.start ? 1 : flags.end ? 2 : 0;
      if (control !== 0) members.push(`"sequence_control_input":[${control}]`);
      if (flags.step !== undefined) members.push(`"sequence_step":[${flags.step}]`);
    }
    const body = Buffer.from(`{"inputs":{${members.join(",")}}}`);
    const answer = check(
      await this.#http.post(this.#path, { "content-type": "application/json", ...routing(sequence) }, body),
    );
    const parsed = JSON.parse(answer.body.toString("utf8")) as { outputs: unknown };
    const named =
      typeof parsed.outputs === "object" && parsed.outputs !== null && !Array.isArray(parsed.outputs)
        ? (parsed.outputs as Record<string, unknown>)
        : { [this.#outputs[0] ?? "output"]: parsed.outputs };
    const outputs = new Map<string, Tensor>();
    for (const [name, value] of Object.entries(named)) {
      if (name === "sequence_id") continue;
      const flat = [value].flat(Number.POSITIVE_INFINITY) as number[];
      outputs.set(name, { datatype: "FP64", shape: [flat.length], data: Float64Array.from(flat) });
    }
    return outputs;
  }

  async close(): Promise<void> {
    this.#http.close();
  }
}
