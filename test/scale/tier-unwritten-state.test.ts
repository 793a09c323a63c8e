import assert from "node:assert/strict";
import { createServer, type Server, Socket } from "node:net";
import { after, before, describe, it } from "node:test";
import { stateEntryBytes } from "../../src/core/sequence/state-store.ts";
import { growingStateConfig, growingStateModel } from "../../tools/onnx/sequence-models.ts";
import { type HttpAnswer, infer, outputData, type SequenceParams } from "../support/http-client.ts";
import { type TempRepository, tempRepository } from "../support/model-repository.ts";
import { waitFor } from "../support/sequence-kit.ts";
import { missingTools, RedisServer, Replica } from "./support/scale-kit.ts";

// A step whose state write the store does not take (Redis unreachable) is not applied: it
// is answered 503 "… failed …; retry the request", and its retry, once Redis is back, runs
// on the state the store holds. Until then the replica counts only the state the sequence
// has: the step's new state, in the replica's memory since the run, is not in its
// state_bytes nor in its --max-state-bytes budget. It was, until the sequence stepped again.

const MODEL = "growing";
const CONFIG = growingStateConfig("max_sequence_idle_microseconds: 60000000");
/** The growing model's CACHE entry as held (key and overhead): 8 bytes of data after its START, 4 more each step. */
const AFTER_START = stateEntryBytes("CACHE", { datatype: "FP32", shape: [0], data: new Float32Array(0) }) + 8;

const skip = missingTools(["redis-server", "redis-cli"]);

/** A TCP proxy to Redis that can be cut (its connections and its port closed) and opened again. */
class CuttableProxy {
  readonly #target: number;
  readonly #sockets = new Set<Socket>();
  #server: Server | undefined;
  port = 0;

  constructor(target: number) {
    this.#target = target;
  }

  async open(): Promise<void> {
    const server = createServer((client) => {
      const upstream = new Socket();
      this.#track(client);
      this.#track(upstream);
      upstream.connect(this.#target, "127.0.0.1");
      client.pipe(upstream).pipe(client);
      const close = () => {
        client.destroy();
        upstream.destroy();
      };
      client.on("error", close).on("close", close);
      upstream.on("error", close).on("close", close);
    });
    await new Promise<void>((resolve) => server.listen(this.port, "127.0.0.1", resolve));
    this.port = (server.address() as { port: number }).port;
    this.#server = server;
  }

  async cut(): Promise<void> {
    const server = this.#server!;
    this.#server = undefined;
    const closed = new Promise<void>((resolve) => server.close(() => resolve()));
    for (const socket of this.#sockets) socket.destroy();
    await closed;
  }

  #track(socket: Socket): void {
    this.#sockets.add(socket);
    socket.on("close", () => this.#sockets.delete(socket));
  }
}

describe("a step whose state the store did not take is not counted as held", { skip }, () => {
  let repository: TempRepository;
  let redis: RedisServer;
  let proxy: CuttableProxy;
  let replica: Replica;

  before(async () => {
    repository = tempRepository({ [MODEL]: { config: CONFIG, onnx: growingStateModel() } });
    redis = await RedisServer.start();
    proxy = new CuttableProxy(redis.port);
    await proxy.open();
    replica = new Replica(repository.path, `redis://127.0.0.1:${proxy.port}`, ["--max-state-bytes", "1024"]);
    await replica.ready();
  });

  after(async () => {
    await replica?.stop();
    await proxy?.cut().catch(() => {});
    await redis?.stop();
    repository?.remove();
  });

  const add = (value: number, sequence: SequenceParams): Promise<HttpAnswer> =>
    infer(replica.url, MODEL, [{ name: "INPUT", datatype: "FP32", shape: [1, 1], data: [value] }], sequence);
  const heldBytes = async () => (await replica.summary(MODEL)).state_bytes;

  it("counts the state the sequence has, and the retry applies the step once", async () => {
    assert.deepEqual(outputData(await add(1, { id: 1, start: true }), "OUTPUT"), [1]);
    assert.equal(await heldBytes(), AFTER_START);

    await proxy.cut();
    const failed = await add(2, { id: 1 });
    assert.equal(failed.status, 503, JSON.stringify(failed.body));
    assert.match(
      String(failed.body.error),
      /^writing the state of sequence 1 of model 'growing' in the state store at \S+ failed \(.*\); retry the request/,
    );
    // The step's 12 bytes were never kept: the replica holds no state for the sequence
    // until its next step reads the store's again.
    assert.equal(await heldBytes(), 0);

    await proxy.open();
    // Retried until the replica has its connection back; the store still holds the START's state.
    const retried = await waitFor("the step applied once Redis is reachable", async () => {
      const answer = await add(2, { id: 1 });
      return answer.status === 503 ? undefined : answer;
    });
    assert.deepEqual(
      [outputData(retried, "OUTPUT"), outputData(retried, "LENGTH")],
      [[3], [3]],
      JSON.stringify(retried.body),
    );
    assert.equal(await heldBytes(), AFTER_START + 4);
  });
});
