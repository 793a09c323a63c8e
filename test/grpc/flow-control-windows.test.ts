import assert from "node:assert/strict";
import { connect } from "node:http2";
import { describe, it } from "node:test";
import { GRPC_FLOW_CONTROL_WINDOW } from "../../src/frontends/grpc/flow-control-windows.ts";
import { startServer } from "./support/grpc-harness.ts";

// The gRPC port opens each connection with 1 MiB flow-control windows, for each stream
// and for the connection, where Node's are 64 KiB: more than 64 KiB of requests in flight
// on one connection no longer wait for the event loop's window updates. Seen from a plain
// HTTP/2 client, as any gRPC client sees them.

describe("gRPC flow-control windows", () => {
  it("a connection may send 1 MiB, and each stream 1 MiB, before the server reads it", async () => {
    const harness = await startServer({ maxConcurrentStreams: 7 });
    const client = connect(`http://127.0.0.1:${harness.port}`);
    try {
      await new Promise((resolve) => client.once("remoteSettings", resolve));
      // The server's WINDOW_UPDATE follows its SETTINGS; its answer to a ping comes after both.
      await new Promise<void>((resolve, reject) =>
        client.ping((error) => (error ? reject(error) : resolve())),
      );
      assert.equal(client.remoteSettings.initialWindowSize, GRPC_FLOW_CONTROL_WINDOW, "each stream's window");
      assert.equal(client.state.remoteWindowSize, GRPC_FLOW_CONTROL_WINDOW, "the connection's window");
      assert.equal(client.remoteSettings.maxConcurrentStreams, 7, "the server's other settings stay");
    } finally {
      client.close();
      await harness.stop();
    }
  });
});
