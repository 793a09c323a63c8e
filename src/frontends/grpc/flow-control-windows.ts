import type { ServerHttp2Session } from "node:http2";
import type { Server } from "@grpc/grpc-js";
import { onEachHttp2Server } from "./http2-servers.ts";

// The gRPC port's HTTP/2 flow-control windows. Node's are 64 KiB, for each stream and
// for the whole connection, and a client may send only that much until the server says
// it has read it (a WINDOW_UPDATE, sent from the event loop). 64 clients' unary requests
// on one connection, or 256 sequences on 16 streams, are more than 64 KiB in flight, so
// every request waited for the event loop's next turn to let the next one in: the tail
// of the latency was the window's. This sets both windows to 1 MiB, gRPC Java's
// server default.
//
// The window bounds only what the server has not read: grpc-js reads each DATA frame as
// it comes (which opens the window again) and keeps a message's bytes until the message
// is whole, so a client declaring a 2 GiB message and sending it slowly makes the server
// hold what it has sent. Those bytes are bounded apart, server-wide, by
// --grpc-max-partial-message-bytes-total (partial-messages.ts).
//
// grpc-js's server has no option for this yet (grpc-node pull request #3058 adds
// `grpc-node.flow_control_window`). Until then the windows are set on the HTTP/2 server
// that grpc-js creates for a connection injector (http2-servers.ts). With a grpc-js that
// lacks that hook, Node's windows stay, and the test of the windows fails.

/** Both windows of every gRPC connection, in bytes. */
export const GRPC_FLOW_CONTROL_WINDOW = 1024 * 1024;

/** Makes every HTTP/2 server `server` creates from now on open its sessions with `window`-byte windows. */
export function widenFlowControlWindows(server: Server, window = GRPC_FLOW_CONTROL_WINDOW): void {
  onEachHttp2Server(server, (http2Server) => {
    // Each stream's window, announced in the server's SETTINGS.
    http2Server.updateSettings({ initialWindowSize: window });
    // The connection's, which SETTINGS cannot change: a WINDOW_UPDATE as the session opens.
    http2Server.on("session", (session: ServerHttp2Session) => {
      try {
        session.setLocalWindowSize(window);
      } catch {
        // A session already closing: there is nothing left to widen.
      }
    });
  });
}
