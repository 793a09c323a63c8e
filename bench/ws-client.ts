import WebSocket from "ws";

// One sequence over one WebSocket (GET /v2/models/{m}/stream): each message is a framed
// binary inference request ([uint32 LE header length][JSON header][raw tensors]); the
// connection itself carries the sequence id, start and end.

const INPUTS =
  '[{"name":"input","datatype":"FP32","shape":[1,512],"parameters":{"binary_data_size":2048}},{"name":"sr","datatype":"INT64","shape":[],"parameters":{"binary_data_size":8}}]';
const HEADER = Buffer.from(`{"inputs":${INPUTS}}`);
const PREFIX = Buffer.alloc(4);
PREFIX.writeUInt32LE(HEADER.byteLength);

export class WsSequenceClient {
  readonly #socket: WebSocket;
  #waiting: ((error?: Error) => void)[] = [];

  private constructor(socket: WebSocket) {
    this.#socket = socket;
    socket.on("message", (data, isBinary) => {
      const resolve = this.#waiting.shift();
      if (!isBinary) {
        const text = data.toString();
        if (text.includes('"error"')) return resolve?.(new Error(text));
      }
      resolve?.();
    });
  }

  static open(port: number, model: string): Promise<WsSequenceClient> {
    return new Promise((resolve, reject) => {
      const socket = new WebSocket(`ws://127.0.0.1:${port}/v2/models/${model}/stream`);
      socket.once("open", () => resolve(new WsSequenceClient(socket)));
      socket.once("error", reject);
    });
  }

  /** Sends one chunk (the raw bytes of `input` then `sr`) and resolves with its answer. */
  send(raw: readonly Uint8Array[]): Promise<void> {
    return new Promise((resolve, reject) => {
      this.#waiting.push((error) => (error ? reject(error) : resolve()));
      this.#socket.send(Buffer.concat([PREFIX, HEADER, ...raw]));
    });
  }

  close(): Promise<void> {
    return new Promise((resolve) => {
      this.#socket.once("close", () => resolve());
      this.#socket.close(1000);
    });
  }
}
