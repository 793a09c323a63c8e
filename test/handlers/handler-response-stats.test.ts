import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { setFlagsFromString } from "node:v8";
import { runInNewContext } from "node:vm";
import { TestClient } from "../grpc/support/grpc-harness.ts";
import { startTestServer, type TestServer } from "../support/test-server.ts";
import {
  decoupledCountConfig,
  type HandlerRepository,
  handlerRepository,
  streamAll,
} from "./support/handler-kit.ts";

// Triton's response_stats for a decoupled model: its responses aggregated by their index
// in their request, each a success, an empty final response, a failure or a cancellation,
// the same over HTTP and gRPC (as Triton's L0_response_statistics checks them).

const GAP_MS = 40;

// COUNT n ≥ 0: n responses, GAP_MS apart, then complete() (the last flagged final when the
// request's `final_last` parameter is set). COUNT −1: one response, then a failure. COUNT
// −2: one response, then it waits to be cancelled.
const RESPONDER = `
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const index = (i: number) => ({ outputs: { INDEX: { datatype: "INT32", shape: [1], data: Int32Array.of(i) } } });
export default {
  execute(requests: any[]) {
    for (const r of requests) void run(r);
  },
};
async function run(r: any) {
  const count = Number(r.inputs.COUNT.data[0]);
  if (count === -1) {
    await r.send(index(0));
    return r.complete(new Error("asked to fail"));
  }
  if (count === -2) {
    await r.send(index(0));
    await new Promise((resolve) => r.signal.addEventListener("abort", resolve));
    return r.complete(new Error("cancelled"));
  }
  for (let i = 0; i < count; i++) {
    await sleep(${GAP_MS});
    await r.send(index(i), { final: i === count - 1 && r.parameters.final_last === true });
  }
  r.complete();
}
`;

let repository: HandlerRepository;
let server: TestServer;

before(async () => {
  repository = handlerRepository(() => ({
    responder: { config: decoupledCountConfig(), files: { "1/model.ts": RESPONDER } },
  }));
  server = await startTestServer(repository.path);
});

after(async () => {
  await server.stop();
  repository.remove();
});

const step = (id: string, count: number, parameters: Record<string, { bool_param: boolean }> = {}) => ({
  model_name: "responder",
  id,
  parameters,
  inputs: [{ name: "COUNT", datatype: "INT32", shape: [1] }],
  raw_input_contents: [Buffer.from(Int32Array.of(count).buffer)],
});

type Duration = { count: number; ns: number };
type ResponseStats = Record<string, Record<string, Duration>>;

async function httpResponseStats(): Promise<ResponseStats> {
  const body = (await (await fetch(`${server.url}/v2/models/responder/stats`)).json()) as {
    model_stats: { response_stats: ResponseStats }[];
  };
  return body.model_stats[0]!.response_stats;
}

/** gRPC's reply in HTTP's form: 64-bit counts come as strings, zeros as absent fields. */
async function grpcResponseStats(client: TestClient): Promise<ResponseStats> {
  type Reply = {
    model_stats: { response_stats: Record<string, Record<string, { count?: string; ns?: string }>> }[];
  };
  const reply = await client.unary<Reply>("ModelStatistics", { name: "responder" });
  const out: ResponseStats = {};
  for (const [key, stats] of Object.entries(reply.model_stats[0]!.response_stats)) {
    out[key] = Object.fromEntries(
      Object.entries(stats).map(([kind, d]) => [
        kind,
        { count: Number(d?.count ?? 0), ns: Number(d?.ns ?? 0) },
      ]),
    );
  }
  return out;
}

test("response_stats aggregate a decoupled model's responses by index: success, empty, fail, cancel", async () => {
  const client = new TestClient(server.grpcPort);
  try {
    // Three responses and an empty final one; two, the last flagged final; one and a failure.
    const received = await streamAll(server.grpcPort, [
      step("three", 3),
      step("two", 2, { final_last: { bool_param: true } }),
      step("fails", -1),
    ]);
    assert.equal(received.filter((m) => (m.error_message ?? "") !== "").length, 1);

    // One response, then the client cancels while the model still has the request.
    const stream = client.stream();
    stream.on("error", () => {});
    const first = new Promise<void>((resolve) => stream.once("data", () => resolve()));
    stream.write(step("cancelled", -2));
    await first;
    stream.cancel();

    const counts = (stats: ResponseStats) =>
      Object.fromEntries(
        Object.entries(stats).map(([key, s]) => [
          key,
          Object.fromEntries(Object.entries(s).map(([kind, d]) => [kind, d.count])),
        ]),
      );
    const expected = {
      "0": { compute_infer: 4, compute_output: 4, success: 4, fail: 0, empty_response: 0, cancel: 0 },
      "1": { compute_infer: 3, compute_output: 2, success: 2, fail: 1, empty_response: 0, cancel: 1 },
      "2": { compute_infer: 1, compute_output: 1, success: 1, fail: 0, empty_response: 0, cancel: 0 },
      "3": { compute_infer: 1, compute_output: 0, success: 0, fail: 0, empty_response: 1, cancel: 0 },
    };
    // The cancelled request is counted once the server has given it up.
    let stats = await httpResponseStats();
    for (let i = 0; i < 100 && stats["1"]?.cancel?.count !== 1; i++) {
      await new Promise((resolve) => setTimeout(resolve, 20));
      stats = await httpResponseStats();
    }
    assert.deepEqual(counts(stats), expected);
    assert.deepEqual(await grpcResponseStats(client), stats, "gRPC's response_stats are HTTP's");

    // What the durations time: the model's work before a response (two first responses
    // each came GAP_MS after their request reached the model).
    const firstNs = stats["0"]!.compute_infer!.ns;
    assert.ok(firstNs >= 2 * GAP_MS * 1e6, `first responses ${firstNs} ns`);
    for (const s of Object.values(stats)) {
      assert.equal(
        s.success!.ns,
        s.compute_infer!.ns - s.fail!.ns - s.empty_response!.ns + s.compute_output!.ns,
      );
    }
  } finally {
    client.close();
  }
});

test("a decoupled request leaves nothing behind once it ends (the heap after 3000 is where it was)", async () => {
  setFlagsFromString("--expose-gc");
  const gc = runInNewContext("gc") as () => void;
  const wave = async () => {
    const received = await streamAll(
      server.grpcPort,
      Array.from({ length: 500 }, (_, i) => step(`w${i}`, 1)),
    );
    assert.equal(received.length, 500);
  };
  await wave();
  gc();
  const before = process.memoryUsage().heapUsed;
  for (let i = 0; i < 6; i++) await wave();
  gc();
  const grownMb = (process.memoryUsage().heapUsed - before) / 2 ** 20;
  // Each request had kept about 7.6 KB: 22 MB for these 3000.
  assert.ok(grownMb < 8, `the heap grew by ${grownMb.toFixed(1)} MB over 3000 requests`);
});
