import type { Server } from "node:http";
import type { Socket } from "node:net";
import type { Refusals } from "../../../core/refusals.ts";

// Node's headersTimeout counts from the first byte of a request: a connection that sends
// nothing, or stops inside its TLS handshake, held its place among --http-max-connections
// for good, and enough of them turned every other client away before access control ran.
// A connection that has not begun a request within the header timeout of its accept is
// closed (counted as http_request_timeout). One whose bytes have begun to come (a head
// split across packets, a TLS handshake) gets the header time once more, which covers
// Node's own count from the first byte; a kept-alive connection's later requests are
// bounded by Node's keep-alive and header timeouts.

export class FirstRequestTimeout {
  readonly #begun = new WeakSet<Socket>();

  constructor(server: Server, timeoutMs: number, refusals?: Refusals) {
    server.on("connection", (socket: Socket) => {
      let lastLook = false;
      const look = (): void => {
        if (this.#begun.has(socket)) return;
        if (!lastLook && socket.bytesRead > 0) {
          lastLook = true;
          timer = setTimeout(look, timeoutMs);
          timer.unref();
          return;
        }
        refusals?.refused("http_request_timeout");
        socket.destroy();
      };
      let timer = setTimeout(look, timeoutMs);
      timer.unref();
      socket.once("close", () => clearTimeout(timer));
    });
  }

  /** A request began on `socket`: its connection is past its first request's deadline. */
  begun(socket: Socket): void {
    // Over TLS a request's socket wraps the one accepted (Node keeps it as `_parent`).
    this.#begun.add((socket as Socket & { _parent?: Socket })._parent ?? socket);
  }
}
