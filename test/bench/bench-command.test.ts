import assert from "node:assert/strict";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { type BenchReport, failedRun, formatReport, runBench } from "../../src/bench/bench-command.ts";
import { type BenchOptions, parseBenchArgs } from "../../src/bench/bench-options.ts";
import { NOT_SENT } from "../../src/bench/load-loop.ts";
import { type ApiKey, OPEN_ACCESS, securityOptions } from "../../src/config/security-options.ts";
import { accumulatorModel } from "../../tools/onnx/sequence-models.ts";
import { getJson } from "../support/http-client.ts";
import { type TempRepository, tempRepository } from "../support/model-repository.ts";
import { run } from "../support/seqserve-process.ts";
import { accumulatorConfig } from "../support/sequence-kit.ts";
import { SILERO_PATH, SILERO_STATEFUL_CONFIG, SILERO_STATEFUL_MODEL } from "../support/silero-oracle.ts";
import { startTestServer } from "../support/test-server.ts";

// `seqserve bench` on tiny runs: it starts its own server, loads a model through a
// protocol, and reports sane, non-zero figures; with --verify every answer equals ONNX
// Runtime run alone in this process. (Figures are printed by benchmarks, never asserted
// on: these tests check that they exist and hang together.)

let repository: TempRepository;
let scratch: string;
before(() => {
  repository = tempRepository({
    [SILERO_STATEFUL_MODEL]: { config: SILERO_STATEFUL_CONFIG, onnx: readFileSync(SILERO_PATH) },
    acc: {
      config: accumulatorConfig("acc", 4, "max_sequence_idle_microseconds: 60000000"),
      onnx: accumulatorModel(),
    },
  });
  scratch = mkdtempSync(join(tmpdir(), "seqserve-bench-test-"));
});
after(() => {
  repository?.remove();
  rmSync(scratch, { recursive: true, force: true });
});

/** `duration`: long enough for a lane's whole sequence on a machine running other tests too. */
function options(args: string[], duration = "0.6"): BenchOptions {
  const parsed = parseBenchArgs([
    "--model-repository",
    repository.path,
    "--duration",
    duration,
    "--warmup",
    "0.1",
    // The in-process limit is timed for 3 s by default; a tenth of that gives its figure here.
    "--limit-duration",
    "0.3",
    "--quiet",
    ...args,
  ]);
  assert.notEqual(parsed, "help");
  return parsed as BenchOptions;
}

/** --verify checked answers, and every one matched ONNX Runtime in this process. */
function assertVerified(report: BenchReport, what: string): void {
  assert.ok(report.oracle !== undefined && report.oracle.checked > 0, `${what}: no answer was checked`);
  assert.equal(report.oracle.mismatches, 0, `${what}: ${report.oracle.examples.join("; ")}`);
}

function assertSane(report: BenchReport): void {
  assert.ok(report.requests > 0, JSON.stringify(report));
  assert.ok(report.requestsPerSecond > 0);
  const { p50, p90, p99, max } = report.latencyMs;
  assert.ok(p50 > 0 && p50 <= p90 && p90 <= p99 && p99 <= max, JSON.stringify(report.latencyMs));
  assert.deepEqual(report.errors, {});
  assert.ok(report.server !== undefined && report.server.meanBatch >= 1);
  const executions = Object.values(report.server.batches).reduce((a, b) => a + b, 0);
  assert.ok(executions > 0);
  assert.ok(
    report.inProcess !== undefined && report.inProcess.rowsPerSecond > 0 && report.inProcess.ratio > 0,
  );
}

// The bound only keeps a hung run from holding the suite: its twelve runs take about 100 s
// beside the other test files on two cores, more on a busier machine.
describe("seqserve bench", { timeout: 300_000 }, () => {
  it("Silero VAD sequences over binary HTTP: sane figures, every answer as ONNX Runtime alone", async () => {
    const [report] = await runBench(
      options([
        "--model",
        SILERO_STATEFUL_MODEL,
        "--protocol",
        "http-binary",
        "--concurrency",
        "8",
        "--sequence-length",
        "6",
        "--input",
        "sr=16000",
        "--verify",
      ]),
    );
    assertSane(report!);
    assert.equal(report!.sequenceLength, 6);
    assert.ok(report!.oracle !== undefined && report!.oracle.checked > 0);
    assert.deepEqual(report!.oracle.examples, []);
    assert.equal(report!.oracle.mismatches, 0);
  });

  it("the same over TF-Serving gRPC, SageMaker sessions (also with the response stream) and WebSocket streams", async () => {
    for (const protocol of ["tfs-grpc", "sagemaker", "sagemaker-stream", "ws"]) {
      const [report] = await runBench(
        options(
          [
            ...["--model", SILERO_STATEFUL_MODEL, "--protocol", protocol, "--concurrency", "4"],
            ...["--sequence-length", "5", "--input", "sr=16000", "--verify"],
          ],
          // A sequence of 5 steps a lane: under load, one WebSocket lane's took longer than 0.6 s.
          "2",
        ),
      );
      assertSane(report!);
      assertVerified(report!, protocol);
    }
  });

  it("an open loop (--rate) keeps its offered rate and checks every answer", async () => {
    const [report] = await runBench(
      options([
        "--model",
        SILERO_STATEFUL_MODEL,
        "--protocol",
        "http-binary",
        "--concurrency",
        "8",
        "--sequence-length",
        "6",
        "--rate",
        "100",
        "--input",
        "sr=16000",
        "--verify",
      ]),
    );
    assertSane(report!);
    assertVerified(report!, "open loop");
    assert.equal(report!.rate, 100);
    // The window (0.6 s) at 100/s holds 60 slots, and a lane 80 ms apart from its next has at
    // most one earlier slot's answer still to come as the window opens: 68 answers at most
    // come within it, where a closed loop of 8 would have far more.
    assert.ok(report!.requests <= 60 + 8, `${report!.requests} requests`);
  });

  it("a sweep over gRPC streams reports each concurrency and draws the chart", async () => {
    const chart = join(scratch, "sweep.svg");
    const reports = await runBench(
      options([
        "--model",
        "acc",
        "--protocol",
        "grpc-stream",
        "--sweep",
        "1,4",
        "--chart",
        chart,
        "--verify",
      ]),
    );
    assert.deepEqual(
      reports.map((r) => r.concurrency),
      [1, 4],
    );
    for (const report of reports) {
      assertSane(report);
      assertVerified(report, `concurrency ${report.concurrency}`);
    }
    assert.ok(existsSync(chart));
    const svg = readFileSync(chart, "utf8");
    assert.match(svg, /^<svg /);
    assert.equal((svg.match(/<circle /g) ?? []).length, 4, "p50 and p99 for each of the two runs");
  });

  // Every step fails (Silero refuses a sample rate of 1): each failure is counted with the
  // server's message, and every sequence the bench gives up is ended. Left open, they held
  // the model's sequence slots until its idle timeout (60 s here), and new sequences
  // waited that long.
  it("against a model that fails every step: errors counted with their message, no sequence left open", async () => {
    const server = await startTestServer(repository.path);
    try {
      const parsed = parseBenchArgs([
        "--url",
        server.url,
        "--grpc",
        `127.0.0.1:${server.grpcPort}`,
        "--model",
        SILERO_STATEFUL_MODEL,
        "--protocol",
        "grpc-stream",
        "--concurrency",
        "8",
        "--sequence-length",
        "6",
        "--input",
        "sr=1",
        "--duration",
        "0.6",
        "--warmup",
        "0.1",
        "--quiet",
      ]);
      assert.notEqual(parsed, "help");
      const [report] = await runBench(parsed as BenchOptions);
      assert.equal(report!.requests, 0);
      assert.deepEqual(Object.keys(report!.errors), ["stream error"]);
      assert.ok(report!.errors["stream error"]! > 0);
      assert.match(report!.errorMessages["stream error"]!, /^onnx runtime error: /);
      const live = await getJson(`${server.url}/v2/models/${SILERO_STATEFUL_MODEL}/sequences`);
      assert.equal((live.body as { summary: { live: number } }).summary.live, 0, JSON.stringify(live.body));
    } finally {
      await server.stop();
    }
  });

  // A step that failed in the model is not sent again: sent again it fails again, or, over
  // TF-Serving, where a failed START leaves its sequence (as in OVMS), it is refused as a
  // sequence that exists, and the report showed that refusal instead of the model's error.
  it("a step that fails in the model is counted with the model's error over gRPC and TF-Serving gRPC, not retried", async () => {
    const server = await startTestServer(repository.path);
    try {
      for (const protocol of ["tfs-grpc", "grpc"]) {
        const parsed = parseBenchArgs([
          ...["--url", server.url, "--grpc", `127.0.0.1:${server.grpcPort}`, "--protocol", protocol],
          ...["--model", SILERO_STATEFUL_MODEL, "--input", "sr=1"],
          ...[
            "--concurrency",
            "2",
            "--sequence-length",
            "4",
            "--duration",
            "0.3",
            "--warmup",
            "0",
            "--quiet",
          ],
        ]);
        assert.notEqual(parsed, "help");
        const [report] = await runBench(parsed as BenchOptions);
        assert.equal(report!.requests, 0, protocol);
        assert.deepEqual(
          Object.keys(report!.errors),
          ["grpc INTERNAL"],
          `${protocol}: ${JSON.stringify(report)}`,
        );
        assert.match(report!.errorMessages["grpc INTERNAL"]!, /^onnx runtime error: /);
        const live = await getJson(`${server.url}/v2/models/${SILERO_STATEFUL_MODEL}/sequences`);
        assert.equal((live.body as { summary: { live: number } }).summary.live, 0, JSON.stringify(live.body));
      }
    } finally {
      await server.stop();
    }
  });

  // --header reaches the bench's own calls too: the model's metadata and config, and the
  // statistics, which a key may not open; the report then says so instead of leaving out
  // the server's lines.
  it("with --header: an API key opens the metadata, config and statistics the bench reads", async () => {
    const keys: ApiKey[] = [
      { name: "tenant", secret: "tenant-key-0123456789", groups: ["inference", "metadata", "model-config"] },
      {
        name: "ops",
        secret: "ops-key-0123456789",
        groups: ["inference", "metadata", "model-config", "statistics"],
      },
    ];
    const server = await startTestServer(repository.path, {
      security: securityOptions({ access: { ...OPEN_ACCESS, apiKeys: keys } }),
    });
    try {
      const bench = async (key: string) => {
        const parsed = parseBenchArgs([
          ...["--url", server.url, "--model", "acc", "--protocol", "http-binary"],
          ...[
            "--concurrency",
            "2",
            "--sequence-length",
            "3",
            "--duration",
            "0.3",
            "--warmup",
            "0",
            "--limit-duration",
            "0.3",
          ],
          ...["--header", `authorization: Bearer ${key}`, "--quiet"],
        ]);
        assert.notEqual(parsed, "help");
        const [report] = await runBench(parsed as BenchOptions);
        return report!;
      };
      const tenant = await bench(keys[0]!.secret);
      assert.equal(tenant.sequenceLength, 3, "the config, read with the key, names a sequence model");
      assert.ok(tenant.requests > 0);
      assert.deepEqual(tenant.errors, {});
      assert.equal(tenant.server, undefined);
      assert.match(
        formatReport(tenant),
        /\n {2}server {7}statistics refused \(403: the API key 'tenant' does not open the statistics API\)/,
      );
      const ops = await bench(keys[1]!.secret);
      assert.deepEqual(ops.errors, {});
      assert.ok(ops.server !== undefined && ops.server.meanBatch >= 1, JSON.stringify(ops));
      assert.equal(ops.statisticsRefused, undefined);
      assert.match(formatReport(ops), /\n {2}batches {6}mean /);
    } finally {
      await server.stop();
    }
  });

  it("a run that proves nothing fails: nothing answered, or --verify with steps it could not check", async () => {
    // Every step fails (sr=1): nothing is answered, and --verify has nothing to vouch for.
    const failing = await run([
      "bench",
      "--model-repository",
      repository.path,
      "--model",
      SILERO_STATEFUL_MODEL,
      "--input",
      "sr=1",
      "--concurrency",
      "2",
      "--duration",
      "0.4",
      "--warmup",
      "0.1",
      "--verify",
      "--quiet",
    ]);
    assert.equal(failing.code, 1, failing.stdout + failing.stderr);
    assert.match(failing.stdout, /oracle {7}0 outputs checked.*; \d+ failed steps not checked/);
    assert.match(failing.stdout, /nothing was answered: the run measured nothing/);
    // The server's errors are shown, the first few only.
    assert.equal(failing.stderr.match(/^seqserve: onnx runtime error/gm)?.length, 5, failing.stderr);
    // No server: said in a line, not a stack.
    const unreachable = await run(["bench", "--url", "http://127.0.0.1:9", "--model", "acc", "--quiet"]);
    assert.equal(unreachable.code, 1);
    assert.match(unreachable.stderr, /^seqserve bench: cannot reach the server at http:\/\/127\.0\.0\.1:9: /);
    assert.doesNotMatch(unreachable.stderr, /\n\s+at /);
  });

  it("an open loop's slots it never sent are not failed steps: a verified run behind schedule passes", () => {
    const report: BenchReport = {
      model: "simple",
      protocol: "http-json",
      concurrency: 4,
      sequenceLength: undefined,
      rate: 3000,
      seconds: 1,
      requests: 1200,
      requestsPerSecond: 1200,
      latencyMs: { p50: 1, p90: 2, p99: 3, max: 4 },
      errors: { [NOT_SENT]: 1400 },
      errorMessages: {},
      server: undefined,
      clientCpuMsPerRequest: 0.1,
      inProcess: undefined,
      oracle: { checked: 3400, mismatches: 0, examples: [] },
    };
    assert.equal(failedRun(report), false);
    assert.match(formatReport(report), /oracle {7}3400 outputs checked, all equal to ONNX Runtime alone$/m);
    const failed = { ...report, errors: { [NOT_SENT]: 1400, "http 500": 2 } };
    assert.equal(failedRun(failed), true);
    assert.match(formatReport(failed), /all equal to ONNX Runtime alone; 2 failed steps not checked$/m);
  });

  it("refuses sequences of one step where a request cannot both start and end one", async () => {
    const server = await startTestServer(repository.path, { sagemakerPort: 0 });
    try {
      for (const protocol of ["tfs-rest", "sagemaker"]) {
        const parsed = parseBenchArgs([
          "--url",
          server.url,
          "--sagemaker",
          `127.0.0.1:${server.server.sagemakerPort}`,
          "--model",
          "acc",
          "--protocol",
          protocol,
          "--sequence-length",
          "1",
          "--quiet",
        ]);
        await assert.rejects(
          runBench(parsed as BenchOptions),
          new RegExp(`--sequence-length 1: ${protocol} cannot start and end a sequence in one request`),
        );
      }
      // Nothing was started on the server.
      const live = await getJson(`${server.url}/v2/models/acc/sequences`);
      assert.equal((live.body as { summary: { live: number } }).summary.live, 0);
    } finally {
      await server.stop();
    }
  });

  it("is a subcommand of seqserve: --help, and usage errors exit 2", async () => {
    const help = await run(["bench", "--help"]);
    assert.equal(help.code, 0);
    assert.match(help.stdout, /^Usage: seqserve bench --model <name>/);
    const bad = await run([
      "bench",
      "--model",
      "acc",
      "--url",
      "http://127.0.0.1:1",
      "--protocol",
      "carrier-pigeon",
    ]);
    assert.equal(bad.code, 2);
    assert.match(
      bad.stderr,
      /--protocol must be one of http-json, http-binary, grpc, grpc-stream, ws, tfs-grpc, tfs-rest, sagemaker, sagemaker-stream/,
    );
    // A warm-up that is not a number would make the run never end.
    assert.throws(
      () => options(["--model", "acc", "--warmup", "soon"]),
      /--warmup expects a number of 0 or more, got 'soon'/,
    );
    assert.equal(options(["--model", "acc", "--warmup", "0"]).warmupSeconds, 0);
    assert.equal((parseBenchArgs(["--model", "acc", "--url", "http://h:1"]) as BenchOptions).limitSeconds, 3);
    assert.equal(options(["--model", "acc", "--limit-duration", "1.5"]).limitSeconds, 1.5);
  });

  // The help writes them with a space: `--server-args "<flags>"`. parseArgs refuses a value
  // that starts with a dash unless it is joined with '=', so only that form worked.
  it("--server-args and --server-node-args take their flags after a space, as the help writes them, or after '='", async () => {
    const spaced = options(["--model", "acc", "--server-node-args", "--cpu-prof --cpu-prof-dir=prof"]);
    assert.deepEqual(spaced.serverNodeArgs, ["--cpu-prof", "--cpu-prof-dir=prof"]);
    const joined = options(["--model", "acc", "--server-args=--log-verbose 1"]);
    assert.deepEqual(joined.serverArgs, ["--log-verbose", "1"]);
    // The command, with the server it starts taking both.
    const ran = await run([
      "bench",
      ...["--model", "acc", "--model-repository", repository.path, "--protocol", "http-binary"],
      ...[
        "--concurrency",
        "1",
        "--sequence-length",
        "2",
        "--duration",
        "0.3",
        "--warmup",
        "0",
        "--limit-duration",
        "0.3",
        "--quiet",
      ],
      ...["--server-args", "--model-control-mode explicit --load-model acc"],
      ...["--server-node-args", "--max-old-space-size=512 --no-warnings"],
    ]);
    assert.equal(ran.code, 0, ran.stderr);
    assert.match(ran.stdout, /^acc over http-binary: 1 sequences of 2 steps/);
    // Node's hint to write '--seed=-XYZ' is not passed on: --seed takes no such value.
    const ambiguous = await run(["bench", "--model", "acc", "--url", "http://127.0.0.1:1", "--seed", "-1"]);
    assert.equal(ambiguous.code, 2);
    assert.match(
      ambiguous.stderr,
      /^seqserve bench: Option '--seed' argument is ambiguous\. Did you forget to specify the option argument for '--seed'\?\n/,
    );
    assert.doesNotMatch(ambiguous.stderr, /To specify|XYZ/);
  });
});
