import { createServer, type Server, type Socket } from "node:net";
import type { ConnectionInjector } from "@grpc/grpc-js";
import type { Refusals } from "../../core/refusals.ts";

// The gRPC port's TCP listener, in front of grpc-js (which takes each connection through
// its connection injector): it bounds how many connections are open at once, and how long
// a connection may take to become HTTP/2. A connection that never sends the HTTP/2
// preface (24 bytes) used to stay open for good, and enough of them used up the process's
// file descriptors.

/** The client's HTTP/2 preface ("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"). */
const PREFACE_BYTES = 24;

export interface GrpcListenerOptions {
  readonly maxConnections: number;
  /** Time from accept to the preface (TLS handshake included), in ms. */
  readonly handshakeTimeoutMs: number;
  readonly refusals?: Refusals | undefined;
}

export interface GrpcListener {
  readonly port: number;
  /** Stops accepting; resolves once every connection has closed. */
  close(): Promise<void>;
  /** Ends the connections still open (after grpc-js has closed its sessions). */
  destroyConnections(): void;
}

export function listenForGrpc(
  injector: ConnectionInjector,
  host: string,
  port: number,
  options: GrpcListenerOptions,
): Promise<GrpcListener> {
  const sockets = new Set<Socket>();
  const server: Server = createServer({ noDelay: true }, (socket: Socket) => {
    sockets.add(socket);
    // bytesRead counts what the socket received, whoever consumes it (HTTP/2 or TLS).
    const timer = setTimeout(() => {
      if (socket.bytesRead >= PREFACE_BYTES) return;
      options.refusals?.refused("grpc_handshake_timeout");
      socket.destroy();
    }, options.handshakeTimeoutMs);
    timer.unref();
    socket.once("close", () => {
      clearTimeout(timer);
      sockets.delete(socket);
    });
    socket.on("error", () => {});
    injector.injectConnection(socket);
  });
  server.maxConnections = options.maxConnections;
  server.on("drop", () => options.refusals?.refused("grpc_connections"));
  return new Promise((resolve, reject) => {
    server.once("error", reject);
    server.listen(port, host, () => {
      server.off("error", reject);
      const address = server.address();
      resolve({
        port: typeof address === "object" && address !== null ? address.port : port,
        close: () => new Promise<void>((done) => server.close(() => done())),
        destroyConnections: () => {
          for (const socket of sockets) socket.destroy();
        },
      });
    });
  });
}
