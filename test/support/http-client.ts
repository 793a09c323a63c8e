// A small KServe v2 HTTP client for tests (on Node's fetch): JSON and binary-extension
// inference, with sequence parameters written exactly (uint64 ids above 2^53 included).

/** Plain bodies: tests compare what the server wrote, not what a decompressor made of it. */
const IDENTITY = { "accept-encoding": "identity" };

function headersOf(response: Response): Record<string, string> {
  return Object.fromEntries(response.headers.entries());
}

export interface JsonInput {
  readonly name: string;
  readonly datatype: string;
  readonly shape: readonly number[];
  readonly data: unknown;
}

export interface HttpAnswer {
  readonly status: number;
  readonly headers: Record<string, string>;
  readonly body: Record<string, unknown>;
}

async function answer(response: Response): Promise<HttpAnswer> {
  const text = await response.text();
  return {
    status: response.status,
    headers: headersOf(response),
    body: text === "" ? {} : (JSON.parse(text) as Record<string, unknown>),
  };
}

/**
 * A GET on a kept connection that the server closed at its keep-alive timeout just as the
 * request went out fails with "fetch failed" (the socket reset or closed under it). A test
 * busy in its own thread (an oracle run) lets its client's idle timer fire late and meets
 * that race; the GET is sent again once, on a new connection, as browsers resend an
 * idempotent request that met a closed kept connection.
 */
function staleConnection(error: unknown): boolean {
  const code = (error as { cause?: { code?: unknown } }).cause?.code;
  return code === "ECONNRESET" || code === "UND_ERR_SOCKET" || code === "EPIPE";
}

export async function getJson(url: string): Promise<HttpAnswer> {
  try {
    return answer(await fetch(url, { headers: IDENTITY }));
  } catch (error) {
    if (!staleConnection(error)) throw error;
    return answer(await fetch(url, { headers: { ...IDENTITY, connection: "close" } }));
  }
}

export async function postJson(url: string, body: unknown): Promise<HttpAnswer> {
  return answer(
    await fetch(url, {
      method: "POST",
      headers: { ...IDENTITY, "content-type": "application/json" },
      body: typeof body === "string" ? body : JSON.stringify(body),
    }),
  );
}

/**
 * POSTs a JSON text and gives back the answer's text unparsed (where its exact digits
 * matter: JSON.parse would round 64-bit integers).
 */
export async function postText(url: string, body: string): Promise<{ status: number; text: string }> {
  const response = await fetch(url, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body,
  });
  return { status: response.status, text: await response.text() };
}

export async function deleteJson(url: string): Promise<HttpAnswer> {
  return answer(await fetch(url, { method: "DELETE", headers: IDENTITY }));
}

export interface SequenceParams {
  readonly id?: number | bigint | string;
  readonly start?: boolean;
  readonly end?: boolean;
  readonly timeoutUs?: number;
  /** sequence_step: the request's place in its sequence (exactly-once retries). */
  readonly step?: number;
}

/** The request body of a JSON inference, with sequence parameters written exactly (bigints too). */
export function inferBody(
  inputs: readonly JsonInput[],
  sequence: SequenceParams = {},
  outputs?: readonly string[],
): string {
  const parameters: string[] = [];
  if (sequence.id !== undefined) {
    parameters.push(
      `"sequence_id":${typeof sequence.id === "string" ? JSON.stringify(sequence.id) : sequence.id.toString()}`,
    );
  }
  if (sequence.start !== undefined) parameters.push(`"sequence_start":${sequence.start}`);
  if (sequence.end !== undefined) parameters.push(`"sequence_end":${sequence.end}`);
  if (sequence.timeoutUs !== undefined) parameters.push(`"timeout":${sequence.timeoutUs}`);
  if (sequence.step !== undefined) parameters.push(`"sequence_step":${sequence.step}`);
  const outputsPart =
    outputs === undefined ? "" : `,"outputs":${JSON.stringify(outputs.map((name) => ({ name })))}`;
  return `{"parameters":{${parameters.join(",")}},"inputs":${JSON.stringify(inputs)}${outputsPart}}`;
}

export async function infer(
  baseUrl: string,
  model: string,
  inputs: readonly JsonInput[],
  sequence: SequenceParams = {},
  outputs?: readonly string[],
): Promise<HttpAnswer> {
  return postJson(`${baseUrl}/v2/models/${model}/infer`, inferBody(inputs, sequence, outputs));
}

/** The data of output `name` of a successful inference answer. */
export function outputData(answer: HttpAnswer, name: string): unknown[] {
  if (answer.status !== 200)
    throw new Error(`inference failed (${answer.status}): ${JSON.stringify(answer.body)}`);
  const outputs = answer.body.outputs as { name: string; data: unknown[] }[];
  const output = outputs.find((o) => o.name === name);
  if (output === undefined) throw new Error(`no output '${name}' in ${JSON.stringify(answer.body)}`);
  return output.data;
}

export interface BinaryInput {
  readonly name: string;
  readonly datatype: string;
  readonly shape: readonly number[];
  readonly data: ArrayBufferView;
}

/** An inference through the binary tensor extension; outputs come back binary too. */
export async function inferBinary(
  baseUrl: string,
  model: string,
  inputs: readonly BinaryInput[],
  sequence: SequenceParams = {},
): Promise<{
  status: number;
  header: Record<string, unknown>;
  outputs: Map<string, Buffer>;
  error?: string;
}> {
  const parameters: string[] = ['"binary_data_output":true'];
  if (sequence.id !== undefined) {
    parameters.push(
      `"sequence_id":${typeof sequence.id === "string" ? JSON.stringify(sequence.id) : sequence.id.toString()}`,
    );
  }
  if (sequence.start) parameters.push('"sequence_start":true');
  if (sequence.end) parameters.push('"sequence_end":true');
  const json = `{"parameters":{${parameters.join(",")}},"inputs":${JSON.stringify(
    inputs.map((i) => ({
      name: i.name,
      datatype: i.datatype,
      shape: i.shape,
      parameters: { binary_data_size: i.data.byteLength },
    })),
  )}}`;
  const header = Buffer.from(json);
  const body = Buffer.concat([
    header,
    ...inputs.map((i) => Buffer.from(i.data.buffer, i.data.byteOffset, i.data.byteLength)),
  ]);
  const response = await fetch(`${baseUrl}/v2/models/${model}/infer`, {
    method: "POST",
    headers: {
      ...IDENTITY,
      "inference-header-content-length": String(header.byteLength),
      "content-type": "application/octet-stream",
    },
    body,
  });
  const raw = Buffer.from(await response.arrayBuffer());
  if (response.status !== 200) {
    return {
      status: response.status,
      header: {},
      outputs: new Map(),
      error: (JSON.parse(raw.toString()) as { error: string }).error,
    };
  }
  const headerLength = Number(response.headers.get("inference-header-content-length"));
  const parsed = JSON.parse(raw.subarray(0, headerLength).toString()) as Record<string, unknown>;
  const outputs = new Map<string, Buffer>();
  let offset = headerLength;
  for (const output of parsed.outputs as { name: string; parameters?: { binary_data_size?: number } }[]) {
    const size = output.parameters?.binary_data_size ?? 0;
    outputs.set(output.name, raw.subarray(offset, offset + size));
    offset += size;
  }
  return { status: response.status, header: parsed, outputs };
}
