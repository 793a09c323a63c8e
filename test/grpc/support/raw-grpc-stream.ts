import { type ClientHttp2Session, type ClientHttp2Stream, connect } from "node:http2";

// A bidirectional gRPC call spoken directly over Node's HTTP/2 client, for the one thing
// a grpc-js client cannot do: stop reading at the HTTP/2 level. (grpc-js clients keep
// draining the connection into memory even when the application stops reading.) While
// this stream is paused its flow-control window is not replenished, like a slow client.

export class RawGrpcStream {
  readonly #session: ClientHttp2Session;
  readonly #request: ClientHttp2Stream;
  #pending: Buffer = Buffer.alloc(0);
  readonly #messages: Buffer[] = [];
  #wake: (() => void) | undefined;

  /** Opens the call with reading paused. */
  constructor(port: number, path: string) {
    // The test queues far more than Node's default 10 MB of outgoing session data.
    this.#session = connect(`http://127.0.0.1:${port}`, { maxSessionMemory: 1024 });
    this.#session.on("error", () => {});
    this.#request = this.#session.request({
      ":method": "POST",
      ":path": path,
      "content-type": "application/grpc",
      te: "trailers",
    });
    this.#request.on("error", () => {});
    this.#request.pause();
  }

  /** Sends one serialized message with gRPC's 5-byte length prefix. */
  send(message: Uint8Array): void {
    const header = Buffer.alloc(5);
    header.writeUInt32BE(message.byteLength, 1);
    this.#request.write(Buffer.concat([header, message]));
  }

  end(): void {
    this.#request.end();
  }

  /** Starts reading and resolves with the next `count` serialized response messages. */
  async read(count: number): Promise<Buffer[]> {
    if (this.#request.listenerCount("data") === 0)
      this.#request.on("data", (chunk: Buffer) => this.#onData(chunk));
    this.#request.resume();
    while (this.#messages.length < count) {
      await new Promise<void>((resolve) => {
        this.#wake = resolve;
      });
    }
    return this.#messages.splice(0, count);
  }

  close(): void {
    this.#request.destroy();
    this.#session.destroy();
  }

  #onData(chunk: Buffer): void {
    this.#pending = this.#pending.length === 0 ? chunk : Buffer.concat([this.#pending, chunk]);
    while (this.#pending.length >= 5) {
      const length = this.#pending.readUInt32BE(1);
      if (this.#pending.length < 5 + length) break;
      this.#messages.push(this.#pending.subarray(5, 5 + length));
      this.#pending = this.#pending.subarray(5 + length);
    }
    this.#wake?.();
  }
}
