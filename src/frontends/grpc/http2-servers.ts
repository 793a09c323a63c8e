import type { Http2SecureServer, Http2Server } from "node:http2";
import type { Server, ServerCredentials } from "@grpc/grpc-js";

// grpc-js's server has no public hook on the HTTP/2 servers it creates (one per port, or
// per connection injector), and seqserve needs two: the flow-control windows
// (flow-control-windows.ts) and following what each stream's partial message holds
// (partial-messages.ts). Both go through grpc-js's `createHttp2Server`, which it calls for
// each; it has already added its own `stream` and `session` listeners to the server it
// returns, so listeners added here run after grpc-js's. With a grpc-js that lacks that
// method nothing is set up, and the tests of both fail.

export type Http2ServerOf = Http2Server | Http2SecureServer;

interface Http2ServerFactory {
  createHttp2Server?: (credentials: ServerCredentials) => Http2ServerOf;
}

/** Runs `setup` on every HTTP/2 server `server` creates from now on. */
export function onEachHttp2Server(server: Server, setup: (http2Server: Http2ServerOf) => void): void {
  const factory = server as unknown as Http2ServerFactory;
  const create = factory.createHttp2Server;
  if (typeof create !== "function") return;
  factory.createHttp2Server = (credentials) => {
    const http2Server = create.call(server, credentials);
    setup(http2Server);
    return http2Server;
  };
}
