import type { IncomingMessage } from "node:http";
import WebSocket from "ws";
import type { TestServer } from "./http-server.ts";

// A WebSocket client for the stream tests: messages are queued as they arrive and taken
// in order; waiting on a socket that closes fails with its close code instead of hanging.

export interface StreamMessage {
  readonly data: Buffer;
  readonly binary: boolean;
}

export interface CloseEvent {
  readonly code: number;
  readonly reason: string;
}

export interface FramedMessage {
  /** The JSON header's text (to check uint64 digits that JSON.parse would round). */
  readonly text: string;
  readonly json: Record<string, unknown>;
  readonly binary: Buffer;
}

export class StreamClient {
  readonly socket: WebSocket;
  readonly closed: Promise<CloseEvent>;
  readonly #messages: StreamMessage[] = [];
  readonly #waiters: { resolve: (m: StreamMessage) => void; reject: (e: Error) => void }[] = [];
  #close: CloseEvent | undefined;

  private constructor(socket: WebSocket) {
    this.socket = socket;
    socket.on("message", (data: Buffer, binary: boolean) => {
      const message = { data, binary };
      const waiter = this.#waiters.shift();
      if (waiter === undefined) this.#messages.push(message);
      else waiter.resolve(message);
    });
    this.closed = new Promise((resolve) => {
      socket.on("close", (code: number, reason: Buffer) => {
        this.#close = { code, reason: reason.toString() };
        for (const waiter of this.#waiters.splice(0)) {
          waiter.reject(new Error(`the stream closed with ${code} (${reason.toString()})`));
        }
        resolve(this.#close);
      });
    });
    socket.on("error", () => {});
  }

  static open(
    server: Pick<TestServer, "port">,
    path: string,
    headers: Record<string, string> = {},
  ): Promise<StreamClient> {
    const socket = new WebSocket(`ws://127.0.0.1:${server.port}${path}`, { headers });
    const client = new StreamClient(socket);
    return new Promise((resolve, reject) => {
      socket.once("open", () => resolve(client));
      socket.once("error", reject);
    });
  }

  /** The next message, in arrival order. */
  next(): Promise<StreamMessage> {
    const message = this.#messages.shift();
    if (message !== undefined) return Promise.resolve(message);
    if (this.#close !== undefined) {
      return Promise.reject(new Error(`the stream closed with ${this.#close.code} (${this.#close.reason})`));
    }
    return new Promise((resolve, reject) => this.#waiters.push({ resolve, reject }));
  }

  /** The next message, which must be text, as JSON. */
  async nextText(): Promise<Record<string, unknown>> {
    const message = await this.next();
    if (message.binary)
      throw new Error(`expected a text message, got ${message.data.byteLength} binary bytes`);
    return JSON.parse(message.data.toString("utf8")) as Record<string, unknown>;
  }

  /** The next message, which must be binary, split into its JSON header and raw bytes. */
  async nextFramed(): Promise<FramedMessage> {
    const message = await this.next();
    if (!message.binary) throw new Error(`expected a binary message, got text: ${message.data.toString()}`);
    return unframe(message.data);
  }

  send(data: Buffer | string | object): void {
    this.socket.send(typeof data === "object" && !Buffer.isBuffer(data) ? JSON.stringify(data) : data);
  }

  /** Closes with `code` and waits until the socket is closed. */
  async close(code = 1000): Promise<CloseEvent> {
    if (this.socket.readyState === WebSocket.OPEN) this.socket.close(code);
    return this.closed;
  }
}

/** A framed binary message: the JSON header's length (uint32 LE), the header, the raw parts. */
export function framed(header: unknown, parts: readonly ArrayBufferView[] = []): Buffer {
  const json = Buffer.from(JSON.stringify(header));
  const prefix = Buffer.alloc(4);
  prefix.writeUInt32LE(json.byteLength, 0);
  return Buffer.concat([
    prefix,
    json,
    ...parts.map((p) => Buffer.from(p.buffer, p.byteOffset, p.byteLength)),
  ]);
}

export function unframe(data: Buffer): FramedMessage {
  const length = data.readUInt32LE(0);
  const text = data.toString("utf8", 4, 4 + length);
  return { text, json: JSON.parse(text) as Record<string, unknown>, binary: data.subarray(4 + length) };
}

/** An upgrade the server refuses: its HTTP status and JSON body. */
export function refusedUpgrade(
  server: { readonly port: number },
  path: string,
  headers: Record<string, string> = {},
): Promise<{ status: number; json: Record<string, unknown> }> {
  const socket = new WebSocket(`ws://127.0.0.1:${server.port}${path}`, { headers });
  socket.on("error", () => {});
  return new Promise((resolve, reject) => {
    socket.once("open", () => {
      socket.terminate();
      reject(new Error(`the upgrade to ${path} was accepted`));
    });
    socket.once("unexpected-response", (_request, response: IncomingMessage) => {
      const chunks: Buffer[] = [];
      response.on("data", (chunk: Buffer) => chunks.push(chunk));
      response.on("end", () => {
        socket.terminate();
        resolve({
          status: response.statusCode ?? 0,
          json: JSON.parse(Buffer.concat(chunks).toString("utf8")) as Record<string, unknown>,
        });
      });
    });
  });
}

/** Waits until `condition` holds, checking at each turn of the event loop. */
export async function until(condition: () => boolean, what: string, limitMs = 5000): Promise<void> {
  const deadline = Date.now() + limitMs;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error(`gave up waiting: ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 2));
  }
}
