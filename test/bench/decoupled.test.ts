import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { type BenchReport, runBench } from "../../src/bench/bench-command.ts";
import { type BenchOptions, BenchUsageError, parseBenchArgs } from "../../src/bench/bench-options.ts";
import {
  decoupledCountConfig,
  type HandlerRepository,
  handlerRepository,
} from "../handlers/support/handler-kit.ts";
import { getJson } from "../support/http-client.ts";
import { run } from "../support/seqserve-process.ts";
import { startTestServer, type TestServer } from "../support/test-server.ts";

// `seqserve bench` on a decoupled model (several responses per request, or none): over the
// streams that carry it (ws, grpc-stream) a step is answered at its final response; the
// clients waited for one answer per request, so a request that sent none stalled its lane
// and the run never ended. The unary protocols, which refuse such a model, are refused
// before the run.

// A sequence's nth request sends n mod 3 responses: none, one or two, then completes.
const UNEVEN = `
export default {
  execute(requests: any[]) {
    for (const r of requests) {
      const steps = (r.sequence.state.get("steps") ?? 0) + 1;
      r.sequence.state.set("steps", steps);
      void respond(r, steps % 3);
    }
  },
};
async function respond(r: any, count: number) {
  for (let i = 0; i < count; i++)
    await r.send({ outputs: { INDEX: { datatype: "INT32", shape: [1], data: Int32Array.of(i) } } });
  r.complete();
}
`;

let repository: HandlerRepository;
let server: TestServer;

before(async () => {
  repository = handlerRepository({
    uneven: {
      config: decoupledCountConfig(
        "sequence_batching { max_sequence_idle_microseconds: 60000000 oldest { max_candidate_sequences: 8 } }",
      ),
      files: { "1/model.ts": UNEVEN },
    },
  });
  server = await startTestServer(repository.path);
});

after(async () => {
  await server?.stop();
  repository?.remove();
});

function options(protocol: string): BenchOptions {
  const parsed = parseBenchArgs([
    ...["--url", server.url, "--grpc", `127.0.0.1:${server.grpcPort}`, "--model", "uneven"],
    ...["--protocol", protocol, "--concurrency", "2", "--sequence-length", "5"],
    ...["--duration", "0.3", "--warmup", "0", "--limit-duration", "0.3", "--quiet"],
  ]);
  assert.notEqual(parsed, "help");
  return parsed as BenchOptions;
}

describe("seqserve bench, a decoupled model", { timeout: 30_000 }, () => {
  for (const protocol of ["ws", "grpc-stream"]) {
    it(`over ${protocol}: each step is answered at its final response, with none, one or two before it`, async () => {
      const [report] = (await runBench(options(protocol))) as [BenchReport];
      assert.ok(report.requests > 0, JSON.stringify(report));
      assert.deepEqual(report.errors, {}, JSON.stringify(report.errorMessages));
      assert.equal(report.sequenceLength, 5);
      const live = await getJson(`${server.url}/v2/models/uneven/sequences`);
      assert.equal((live.body as { summary: { live: number } }).summary.live, 0, JSON.stringify(live.body));
    });
  }

  it("with a server of its own (--model-repository): model code runs with no in-process model; --verify says why it cannot", async () => {
    const own = (...extra: string[]) =>
      parseBenchArgs([
        ...["--model-repository", repository.path, "--model", "uneven", "--protocol", "ws"],
        ...[
          "--concurrency",
          "2",
          "--sequence-length",
          "5",
          "--duration",
          "0.3",
          "--warmup",
          "0",
          "--limit-duration",
          "0.3",
          "--quiet",
        ],
        ...extra,
      ]) as BenchOptions;
    const [report] = (await runBench(own())) as [BenchReport];
    assert.ok(report.requests > 0, JSON.stringify(report));
    assert.deepEqual(report.errors, {}, JSON.stringify(report.errorMessages));
    assert.equal(report.inProcess, undefined);
    await assert.rejects(
      runBench(own("--verify")),
      (error: unknown) =>
        error instanceof BenchUsageError &&
        error.message ===
          "model 'uneven' is model code: --verify checks answers against the model run alone in ONNX Runtime, which runs only ONNX models",
    );
  });

  it("over a unary protocol: refused before the run, saying which protocols carry it", async () => {
    for (const protocol of ["http-binary", "grpc", "tfs-rest", "sagemaker"]) {
      await assert.rejects(
        runBench(options(protocol)),
        (error: unknown) =>
          error instanceof BenchUsageError &&
          error.message ===
            `model 'uneven' is decoupled (several responses per request): ${protocol} cannot carry its responses; use --protocol ws or grpc-stream`,
      );
    }
    const cli = await run([
      ...["bench", "--url", server.url, "--model", "uneven", "--protocol", "http-json"],
      ...["--duration", "0.3", "--warmup", "0", "--limit-duration", "0.3", "--quiet"],
    ]);
    assert.equal(cli.code, 2, cli.stderr);
    assert.match(
      cli.stderr,
      /^seqserve bench: model 'uneven' is decoupled \(several responses per request\): /,
    );
  });
});
