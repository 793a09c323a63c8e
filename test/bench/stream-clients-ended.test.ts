import assert from "node:assert/strict";
import type { AddressInfo } from "node:net";
import { after, before, describe, it } from "node:test";
import { Server, ServerCredentials, type ServerDuplexStream } from "@grpc/grpc-js";
import { WebSocketServer } from "ws";
import type { BenchSequence, ClientTarget } from "../../src/bench/clients/bench-client.ts";
import { StepError } from "../../src/bench/clients/bench-client.ts";
import { KserveStreamClient } from "../../src/bench/clients/grpc-clients.ts";
import { WsStreamClient } from "../../src/bench/clients/ws-client.ts";
import type { Tensor } from "../../src/core/tensor.ts";
import { inferenceTypes } from "../../src/frontends/grpc/proto-definitions.ts";
import { framed } from "../http/support/ws-client.ts";

// The benchmark's stream clients when the server ends a stream under them: the steps the
// stream carried fail with a StepError (counted, and the lane goes on with a new sequence)
// instead of waiting forever, and the next steps get a new stream. Servers here end the
// first stream they are sent on, and answer on every later one.

const identity = (bytes: Buffer): Buffer => bytes;

/** ModelStreamInfer as raw bytes both ways, for the fake servers below. */
const RAW_STREAM_INFER = {
  ModelStreamInfer: {
    path: "/inference.GRPCInferenceService/ModelStreamInfer",
    requestStream: true,
    responseStream: true,
    requestSerialize: identity,
    requestDeserialize: identity,
    responseSerialize: identity,
    responseDeserialize: identity,
  },
};

const inputs: ReadonlyMap<string, Tensor> = new Map([
  ["INPUT", { datatype: "INT32", shape: [1, 1], data: Int32Array.of(1) }],
]);

function target(ports: { http?: number; grpc?: number }): ClientTarget {
  return {
    model: "m",
    http: ports.http === undefined ? undefined : { host: "127.0.0.1", port: ports.http },
    grpc: ports.grpc === undefined ? undefined : { host: "127.0.0.1", port: ports.grpc },
    sagemaker: undefined,
    concurrency: 1,
    streams: 1,
    outputs: [],
  };
}

const sequence = (index: number, id?: bigint): BenchSequence => ({ index, id });

/** The client's step, which must settle (a hang fails the test by its timeout). */
async function failsWithStepError(step: Promise<unknown>, what: string): Promise<StepError> {
  const error = await step.then(
    () => assert.fail(`${what}: answered`),
    (e: unknown) => e,
  );
  assert.ok(error instanceof StepError, `${what}: ${String(error)}`);
  return error;
}

describe("bench stream clients: a stream the server ends", { timeout: 30_000 }, () => {
  describe("gRPC ModelStreamInfer", () => {
    let server: Server;
    let port: number;
    before(async () => {
      const request = inferenceTypes().lookupType("inference.ModelInferRequest");
      const response = inferenceTypes().lookupType("inference.ModelStreamInferResponse");
      let calls = 0;
      server = new Server();
      server.addService(RAW_STREAM_INFER, {
        ModelStreamInfer: (call: ServerDuplexStream<Buffer, Buffer>) => {
          const first = ++calls === 1;
          call.on("data", (message: Buffer) => {
            if (first) return call.end();
            const { id } = request.decode(message) as unknown as { id: string };
            const answer = { error_message: "", infer_response: { model_name: "m", id, outputs: [] } };
            call.write(Buffer.from(response.encode(answer).finish()));
          });
          call.on("end", () => call.end());
        },
      });
      port = await new Promise<number>((resolve, reject) =>
        server.bindAsync("127.0.0.1:0", ServerCredentials.createInsecure(), (error, bound) =>
          error ? reject(error) : resolve(bound),
        ),
      );
    });
    after(() => server.forceShutdown());

    it("fails the step the ended stream carried, and sends the next on a new stream", async () => {
      const client = new KserveStreamClient(target({ grpc: port }));
      const error = await failsWithStepError(
        client.step(sequence(0, 7n), inputs, { start: true, end: false, step: 1 }),
        "the step on the ended stream",
      );
      assert.match(error.message, /stream ended/);
      const outputs = await client.step(sequence(1, 8n), inputs, { start: true, end: false, step: 1 });
      assert.equal(outputs.size, 0, "the new stream answers");
      await client.close();
    });
  });

  describe("WebSocket streams", () => {
    let server: WebSocketServer;
    let port: number;
    /** The server closes the first connection after its first message, and answers on the others. */
    let connections = 0;
    before(async () => {
      server = new WebSocketServer({ host: "127.0.0.1", port: 0 });
      await new Promise<void>((resolve) => server.once("listening", () => resolve()));
      port = (server.address() as AddressInfo).port;
      server.on("connection", (socket) => {
        const first = ++connections === 1;
        socket.on("message", () => {
          if (first) return socket.close(1011);
          socket.send(framed({ outputs: [] }), { binary: true });
        });
      });
    });
    after(() => new Promise<void>((resolve) => server.close(() => resolve())));

    it("fails the sequence whose connection closed, at once on its next step; a new sequence connects again", async () => {
      connections = 0;
      const client = new WsStreamClient(target({ http: port }));
      const live = sequence(0, 7n);
      await failsWithStepError(client.step(live, inputs, { start: true, end: false }), "the step sent");
      const next = await failsWithStepError(
        client.step(live, inputs, { start: false, end: false }),
        "the sequence's next step",
      );
      assert.equal(next.kind, "ws closed");
      const outputs = await client.step(sequence(1, 8n), inputs, { start: true, end: false });
      assert.equal(outputs.size, 0, "the new connection answers");
      await client.close();
    });

    it("a stateless lane whose connection closed connects again for its next request", async () => {
      connections = 0;
      const client = new WsStreamClient(target({ http: port }));
      const lane = sequence(0);
      await failsWithStepError(client.step(lane, inputs, { start: false, end: false }), "the request sent");
      const outputs = await client.step(lane, inputs, { start: false, end: false });
      assert.equal(outputs.size, 0, "the next request goes on a new connection, which answers");
      assert.equal(connections, 2);
      await client.close();
    });
  });
});

// A step whose answer never comes (a decoupled request that sends nothing, a server that
// hangs) fails as a "timeout" after the client's step timeout, here short; it waited for
// ever, and its lane with it, so the run never ended.
describe("bench stream clients: a step never answered", { timeout: 10_000 }, () => {
  const silent = (ports: { http?: number; grpc?: number }): ClientTarget => ({
    ...target(ports),
    stepTimeoutMs: 200,
  });

  it("over gRPC ModelStreamInfer fails as a timeout", async () => {
    const server = new Server();
    server.addService(RAW_STREAM_INFER, {
      // Reads every request, answers none.
      ModelStreamInfer: (call: ServerDuplexStream<Buffer, Buffer>) => {
        call.on("data", () => {});
        call.on("end", () => call.end());
      },
    });
    const port = await new Promise<number>((resolve, reject) =>
      server.bindAsync("127.0.0.1:0", ServerCredentials.createInsecure(), (error, bound) =>
        error ? reject(error) : resolve(bound),
      ),
    );
    try {
      const client = new KserveStreamClient(silent({ grpc: port }));
      const error = await failsWithStepError(
        client.step(sequence(0, 7n), inputs, { start: true, end: false, step: 1 }),
        "the unanswered step",
      );
      assert.equal(error.kind, "timeout");
      assert.equal(error.message, "no answer in 0.2 s");
      await client.close();
    } finally {
      server.forceShutdown();
    }
  });

  it("over a WebSocket fails as a timeout, and the connection, whose answers come by their place, is dropped", async () => {
    const server = new WebSocketServer({ host: "127.0.0.1", port: 0 });
    await new Promise<void>((resolve) => server.once("listening", () => resolve()));
    const port = (server.address() as AddressInfo).port;
    const closed = new Promise<void>((resolve) =>
      server.on("connection", (socket) => socket.on("close", () => resolve())),
    );
    try {
      const client = new WsStreamClient(silent({ http: port }));
      const live = sequence(0, 7n);
      const error = await failsWithStepError(
        client.step(live, inputs, { start: true, end: false }),
        "the unanswered step",
      );
      assert.equal(error.kind, "timeout");
      await closed;
      const next = await failsWithStepError(
        client.step(live, inputs, { start: false, end: false }),
        "the sequence's next step",
      );
      assert.equal(next.kind, "ws closed");
      await client.close();
    } finally {
      for (const socket of server.clients) socket.terminate();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    }
  });
});
