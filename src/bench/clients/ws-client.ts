import WebSocket from "ws";
import type { DataType } from "../../core/datatype.ts";
import type { Tensor } from "../../core/tensor.ts";
import { decodeJsonTensor } from "../../frontends/common/kserve/json-tensor.ts";
import { decodeRawTensor, encodeRawTensor } from "../../frontends/common/raw-tensor.ts";
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

// WebSocket sequence streams (GET /v2/models/{m}/stream): one connection per sequence
// (its id in the query), framed binary messages ([uint32 LE header length][JSON][raw
// tensors]); answers come in the order the messages were sent. For a stateless model each
// closed-loop client has its own connection. A decoupled model's responses to a message
// all come before the next message's, the last flagged `triton_final_response`.

interface Waiter {
  readonly resolve: (outputs: Map<string, Tensor>) => void;
  readonly reject: (error: Error) => void;
  /** A decoupled request's latest response with outputs, until its final response. */
  outputs?: Map<string, Tensor>;
}

interface Connection {
  readonly socket: WebSocket;
  readonly waiting: Waiter[];
}

interface Answer {
  readonly outputs: Map<string, Tensor>;
  /** `triton_final_response`: false on a decoupled response that more follow. */
  readonly final: boolean;
}

interface AnswerParameters {
  readonly triton_final_response?: boolean;
}

function frame(inputs: ReadonlyMap<string, Tensor>, end: boolean, decoupled: boolean): Buffer {
  const raws: Uint8Array[] = [];
  const described: string[] = [];
  for (const [name, tensor] of inputs) {
    const raw = encodeRawTensor(tensor);
    raws.push(raw);
    described.push(
      `{"name":${JSON.stringify(name)},"datatype":"${tensor.datatype}","shape":[${tensor.shape.join(",")}],"parameters":{"binary_data_size":${raw.byteLength}}}`,
    );
  }
  const flags = [
    ...(end ? ['"sequence_end":true'] : []),
    // A decoupled request may send no response: the empty final one says it is done.
    ...(decoupled ? ['"triton_enable_empty_final_response":true'] : []),
  ];
  const parameters = flags.length === 0 ? "" : `"parameters":{${flags.join(",")}},`;
  const header = Buffer.from(`{${parameters}"inputs":[${described.join(",")}]}`);
  const prefix = Buffer.alloc(4);
  prefix.writeUInt32LE(header.byteLength);
  return Buffer.concat([prefix, header, ...raws]);
}

function decodeAnswer(data: Buffer, isBinary: boolean): Answer {
  if (!isBinary) {
    const json = JSON.parse(data.toString("utf8")) as {
      error?: string;
      parameters?: AnswerParameters;
      outputs?: { name: string; datatype: DataType; shape: number[]; data: unknown }[];
    };
    if (json.error !== undefined) throw new StepError("stream error", json.error);
    const outputs = new Map<string, Tensor>();
    for (const o of json.outputs ?? [])
      outputs.set(o.name, decodeJsonTensor(o.name, o.datatype, o.shape, o.data));
    return { outputs, final: json.parameters?.triton_final_response !== false };
  }
  const length = data.readUInt32LE(0);
  const header = JSON.parse(data.subarray(4, 4 + length).toString("utf8")) as {
    parameters?: AnswerParameters;
    outputs: {
      name: string;
      datatype: DataType;
      shape: number[];
      parameters?: { binary_data_size?: number };
    }[];
  };
  const outputs = new Map<string, Tensor>();
  let offset = 4 + length;
  for (const o of header.outputs) {
    const size = o.parameters?.binary_data_size ?? 0;
    outputs.set(o.name, decodeRawTensor(o.name, o.datatype, o.shape, data.subarray(offset, offset + size)));
    offset += size;
  }
  return { outputs, final: header.parameters?.triton_final_response !== false };
}

export class WsStreamClient implements BenchClient {
  readonly #base: string;
  readonly #headers: Readonly<Record<string, string>>;
  readonly #decoupled: boolean;
  readonly #timeoutMs: number;
  readonly #open = new Set<Connection>();

  constructor(target: ClientTarget) {
    this.#headers = target.headers ?? {};
    this.#decoupled = target.decoupled ?? false;
    this.#timeoutMs = target.stepTimeoutMs ?? STEP_TIMEOUT_MS;
    this.#base = `ws://${authority(required(target.http, "HTTP"))}/v2/models/${encodeURIComponent(target.model)}/stream`;
  }

  async step(
    sequence: BenchSequence,
    inputs: ReadonlyMap<string, Tensor>,
    flags: StepFlags,
  ): Promise<Map<string, Tensor>> {
    let connection = sequence.session as Connection | undefined;
    if (connection !== undefined && !flags.start && connection.socket.readyState !== WebSocket.OPEN) {
      // The server closed it. A sequence ended with its connection: the step fails and the
      // lane starts a new sequence. A stateless lane just connects again.
      sequence.session = undefined;
      connection = undefined;
      if (sequence.id !== undefined) {
        throw new StepError("ws closed", "the server closed the sequence's stream before its end");
      }
    }
    if (connection === undefined || flags.start) {
      connection = await this.#connect(sequence.id);
      sequence.session = connection;
    }
    const live = connection;
    let timer: NodeJS.Timeout | undefined;
    const answer = new Promise<Map<string, Tensor>>((resolve, reject) => {
      const waiter: Waiter = { resolve, reject };
      live.waiting.push(waiter);
      timer = setTimeout(() => {
        // Answers are matched by their place: a late one would be taken as the next
        // step's. The connection is dropped (the server ends its sequence, cancelled).
        const at = live.waiting.indexOf(waiter);
        if (at >= 0) live.waiting.splice(at, 1);
        reject(timedOut(this.#timeoutMs));
        live.socket.terminate();
      }, this.#timeoutMs);
    });
    live.socket.send(frame(inputs, flags.end && sequence.id !== undefined, this.#decoupled));
    try {
      return await answer;
    } finally {
      clearTimeout(timer);
      // The server closes the stream after the answer to its end.
      if (flags.end && sequence.id !== undefined) {
        this.#open.delete(live);
        sequence.session = undefined;
      }
    }
  }

  #connect(id: bigint | undefined): Promise<Connection> {
    const url = id === undefined ? this.#base : `${this.#base}?sequence_id=${id}`;
    return new Promise((resolve, reject) => {
      const socket = new WebSocket(url, { headers: this.#headers });
      const connection: Connection = { socket, waiting: [] };
      socket.on("message", (data: Buffer, isBinary: boolean) => {
        const waiter = connection.waiting[0];
        if (waiter === undefined) return;
        let answer: Answer;
        try {
          answer = decodeAnswer(data, isBinary);
        } catch (error) {
          connection.waiting.shift();
          waiter.reject(error as Error);
          return;
        }
        // A decoupled request is answered at its final response; its outputs are the last sent.
        if (this.#decoupled) {
          if (answer.outputs.size > 0) waiter.outputs = answer.outputs;
          if (!answer.final) return;
        }
        connection.waiting.shift();
        waiter.resolve(waiter.outputs ?? answer.outputs);
      });
      socket.on("close", (code) => {
        this.#open.delete(connection);
        for (const waiter of connection.waiting.splice(0)) {
          waiter.reject(new StepError(`ws close ${code}`, `the stream closed with code ${code}`));
        }
      });
      socket.once("open", () => {
        this.#open.add(connection);
        resolve(connection);
      });
      socket.once("error", (error) => reject(new StepError("connection", error.message)));
    });
  }

  async close(): Promise<void> {
    await Promise.all(
      [...this.#open].map(
        (c) =>
          new Promise<void>((resolve) => {
            c.socket.once("close", () => resolve());
            c.socket.close(1000);
          }),
      ),
    );
  }
}
