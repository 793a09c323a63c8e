import { connect } from "node:net";
import type { ServiceError } from "@grpc/grpc-js";
import { SILERO_SAMPLES } from "../../support/silero-oracle.ts";
import {
  controlTensor,
  floatOutput,
  floatTensor,
  int64Tensor,
  responseSequenceId,
  sequenceIdTensor,
  type TensorProtoJs,
  type TfsClient,
} from "./tfs-client.ts";

// One Silero VAD step as an OpenVINO Model Server client sends it, over gRPC (Predict
// with TensorProtos) or REST (the column form), with the special inputs as the OVMS guide
// writes them. Both give the same outcome shape, so a test can check a behaviour on both
// transports with the same expectations.

export type Transport = "grpc" | "rest";

export interface StepRequest {
  /** undefined: no sequence_id input at all. */
  readonly id?: bigint | undefined;
  /** undefined: no sequence_control_input at all. */
  readonly control?: number | undefined;
  readonly audio?: Float32Array;
  /** Replaces (or, with undefined values, removes) special inputs as sent: for malformed requests. */
  readonly grpcSpecials?: Readonly<Record<string, TensorProtoJs | undefined>>;
  readonly restSpecials?: Readonly<Record<string, string | undefined>>;
}

export type StepOutcome =
  | { readonly ok: true; readonly id: bigint; readonly output: number }
  /** `code`: the gRPC status code, or the HTTP status. */
  | { readonly ok: false; readonly code: number; readonly message: string };

export interface Endpoints {
  readonly grpc: TfsClient;
  /** e.g. http://127.0.0.1:1234 */
  readonly url: string;
}

const silence = new Float32Array(SILERO_SAMPLES);

export async function grpcStep(client: TfsClient, model: string, step: StepRequest): Promise<StepOutcome> {
  const inputs: Record<string, TensorProtoJs | undefined> = {
    input: floatTensor(step.audio ?? silence, [1, (step.audio ?? silence).length]),
    sr: int64Tensor([16000n], [1]),
    ...(step.id === undefined ? {} : { sequence_id: sequenceIdTensor(step.id) }),
    ...(step.control === undefined ? {} : { sequence_control_input: controlTensor(step.control) }),
    ...step.grpcSpecials,
  };
  for (const key of Object.keys(inputs)) if (inputs[key] === undefined) delete inputs[key];
  try {
    const response = await client.predict({ model_spec: { name: model }, inputs });
    return { ok: true, id: responseSequenceId(response), output: floatOutput(response, "output")[0]! };
  } catch (error) {
    const e = error as ServiceError;
    return { ok: false, code: e.code, message: e.details };
  }
}

/** The REST body, written by hand so ids keep every digit. */
export function restBody(step: StepRequest): string {
  const members: Record<string, string | undefined> = {
    input: `[[${Array.from(step.audio ?? silence).join(",")}]]`,
    sr: "[16000]",
    ...(step.id === undefined ? {} : { sequence_id: `[${step.id}]` }),
    ...(step.control === undefined ? {} : { sequence_control_input: `[${step.control}]` }),
    ...step.restSpecials,
  };
  const text = Object.entries(members)
    .filter(([, v]) => v !== undefined)
    .map(([k, v]) => `${JSON.stringify(k)}: ${v}`)
    .join(", ");
  return `{"inputs": {${text}}}`;
}

export async function restStep(url: string, model: string, step: StepRequest): Promise<StepOutcome> {
  const response = await fetch(`${url}/v1/models/${model}:predict`, { method: "POST", body: restBody(step) });
  return restOutcome(response.status, await response.text());
}

function restOutcome(status: number, text: string): StepOutcome {
  if (status !== 200)
    return { ok: false, code: status, message: (JSON.parse(text) as { error: string }).error };
  // The id is read from the text: JSON.parse would round it above 2^53.
  const id = /"sequence_id":\[(\d+)\]/.exec(text)?.[1];
  if (id === undefined) throw new Error(`no sequence_id in ${text}`);
  const body = JSON.parse(text) as { outputs: { output: number[][] } };
  return { ok: true, id: BigInt(id), output: body.outputs.output[0]![0]! };
}

export function step(endpoints: Endpoints, transport: Transport, model: string, request: StepRequest) {
  return transport === "grpc"
    ? grpcStep(endpoints.grpc, model, request)
    : restStep(endpoints.url, model, request);
}

/**
 * Several REST steps written back to back on one connection (HTTP pipelining), so the
 * server reads them in one go and in order: for behaviours that depend on a request
 * arriving while an earlier one has not run yet.
 */
export async function pipelinedRestSteps(
  url: string,
  model: string,
  steps: readonly StepRequest[],
): Promise<StepOutcome[]> {
  const { hostname, port } = new URL(url);
  const requests = steps.map((s) => {
    const body = restBody(s);
    return `POST /v1/models/${model}:predict HTTP/1.1\r\nHost: ${hostname}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`;
  });
  const socket = connect(Number(port), hostname);
  const answers: { status: number; text: string }[] = [];
  let buffer = Buffer.alloc(0);
  await new Promise<void>((resolve, reject) => {
    socket.once("error", reject);
    socket.on("data", (chunk: Buffer) => {
      buffer = Buffer.concat([buffer, chunk]);
      for (;;) {
        const head = buffer.indexOf("\r\n\r\n");
        if (head < 0) return;
        const header = buffer.subarray(0, head).toString("latin1");
        const length = Number(/content-length: *(\d+)/i.exec(header)?.[1] ?? 0);
        if (buffer.byteLength < head + 4 + length) return;
        answers.push({
          status: Number(header.split(" ")[1]),
          text: buffer.subarray(head + 4, head + 4 + length).toString("utf8"),
        });
        buffer = buffer.subarray(head + 4 + length);
        if (answers.length === steps.length) {
          socket.end();
          resolve();
          return;
        }
      }
    });
    socket.write(requests.join(""));
  });
  return answers.map(({ status, text }) => restOutcome(status, text));
}
