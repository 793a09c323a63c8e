import { randomBytes } from "node:crypto";
import { existsSync, writeFileSync } from "node:fs";
import { dirname, resolve } from "node:path";
import type { TensorMetadata } from "../core/model.ts";
import { BENCH_HELP, type BenchOptions, BenchUsageError, parseBenchArgs } from "./bench-options.ts";
import { type ClientTarget, DECOUPLED_PROTOCOLS, type Endpoint } from "./clients/bench-client.ts";
import { createClient } from "./clients/create-client.ts";
import { type InProcessLimit, inProcessLimit } from "./inprocess-limit.ts";
import { NOT_SENT, runLoad } from "./load-loop.ts";
import { type LocalModel, openLocalModel } from "./local-model.ts";
import { checkAgainstOracle, type OracleReport } from "./oracle.ts";
import { processCpuMs, type StartedServer, startServerProcess } from "./server-process.ts";
import {
  errorText,
  readStatistics,
  type ServerSide,
  type StatisticsReading,
  serverSide,
} from "./server-statistics.ts";
import { latencyThroughputSvg, type SweepPoint } from "./svg-chart.ts";
import { Workload } from "./workload.ts";

// `seqserve bench`: one model, one protocol, a closed or open loop for a fixed time; the
// report gives what the client saw (requests/s, latency percentiles, errors by kind), what
// the server did (batch sizes, queue and compute time, its CPU per request when it runs
// here), the in-process limit at those batch sizes, and, with --verify, the oracle check.

export interface BenchReport {
  readonly model: string;
  readonly protocol: string;
  readonly concurrency: number;
  readonly sequenceLength: number | undefined;
  readonly rate: number | undefined;
  readonly seconds: number;
  /** Answers that came inside the window (requestsPerSecond's count). */
  readonly requests: number;
  readonly requestsPerSecond: number;
  readonly latencyMs: {
    readonly p50: number;
    readonly p90: number;
    readonly p99: number;
    readonly max: number;
  };
  readonly errors: Readonly<Record<string, number>>;
  /** The first message of each kind of error. */
  readonly errorMessages: Readonly<Record<string, string>>;
  readonly server:
    | {
        readonly batches: Readonly<Record<string, number>>;
        readonly meanBatch: number;
        readonly queueMs: number;
        readonly computeMs: number;
        /** Server process CPU per answered request, when the benchmark started the server. */
        readonly cpuMsPerRequest: number | undefined;
      }
    | undefined;
  /** Why there is no `server` part: the server refused its statistics ("403: …"), e.g. to the key given. */
  readonly statisticsRefused?: string;
  /** This process's CPU per answered request: the load generator's own cost, a bound on a 2-core machine. */
  readonly clientCpuMsPerRequest: number;
  readonly inProcess: { readonly rowsPerSecond: number; readonly ratio: number } | undefined;
  readonly oracle: OracleReport | undefined;
}

interface Endpoints {
  readonly httpBase: string;
  readonly target: Omit<ClientTarget, "concurrency" | "streams" | "outputs">;
  readonly server: StartedServer | undefined;
}

/** `host:port` (an IPv6 host in brackets) as an endpoint; the host without its brackets. */
function endpoint(value: string | undefined): Endpoint | undefined {
  if (value === undefined) return undefined;
  const at = value.lastIndexOf(":");
  return { host: value.slice(0, at).replace(/^\[(.*)\]$/, "$1"), port: Number(value.slice(at + 1)) };
}

/** A port of the server this benchmark started, on loopback. */
const local = (port: number | undefined): Endpoint | undefined =>
  port === undefined ? undefined : { host: "127.0.0.1", port };

async function endpoints(options: BenchOptions): Promise<Endpoints> {
  if (options.modelRepository !== undefined) {
    const server = await startServerProcess(
      options.modelRepository,
      options.serverArgs,
      options.serverNodeArgs,
    );
    return {
      httpBase: `http://127.0.0.1:${server.ports.http}`,
      target: {
        model: options.model,
        http: local(server.ports.http),
        grpc: local(server.ports.grpc),
        sagemaker: local(server.ports.sagemaker),
      },
      server,
    };
  }
  const url = new URL(options.url!);
  return {
    httpBase: url.origin,
    target: {
      model: options.model,
      http: endpoint(`${url.hostname}:${url.port || 80}`),
      grpc: endpoint(options.grpc),
      sagemaker: endpoint(options.sagemaker),
    },
    server: undefined,
  };
}

/** The protocols whose one request can both start and end a sequence (KServe's flags). */
const ONE_REQUEST_SEQUENCES: ReadonlySet<string> = new Set([
  "http-json",
  "http-binary",
  "grpc",
  "grpc-stream",
  "ws",
]);

interface ModelShape {
  readonly inputs: TensorMetadata[];
  readonly outputs: TensorMetadata[];
  readonly sequences: boolean;
  /** Several responses per request, or none (Triton's decoupled models). */
  readonly decoupled: boolean;
}

async function describeModel(
  httpBase: string,
  model: string,
  headers: Readonly<Record<string, string>>,
): Promise<ModelShape> {
  const path = `${httpBase}/v2/models/${encodeURIComponent(model)}`;
  const metadata = await fetch(path, { headers }).catch((error: Error) => {
    const cause = error.cause instanceof Error ? error.cause.message : error.message;
    throw new Error(`cannot reach the server at ${httpBase}: ${cause}`);
  });
  if (!metadata.ok) throw new Error(`model '${model}': ${await errorText(metadata)}`);
  const { inputs, outputs } = (await metadata.json()) as {
    inputs: TensorMetadata[];
    outputs: TensorMetadata[];
  };
  // The config says whether the model takes sequences: a refusal read as a config would
  // have run a sequence model as a stateless one.
  const configResponse = await fetch(`${path}/config`, { headers });
  if (!configResponse.ok) throw new Error(`model '${model}' config: ${await errorText(configResponse)}`);
  const config = (await configResponse.json()) as {
    sequence_batching?: unknown;
    model_transaction_policy?: { decoupled?: boolean };
  };
  return {
    inputs,
    outputs,
    sequences: config.sequence_batching !== undefined,
    decoupled: config.model_transaction_policy?.decoupled === true,
  };
}

const round = (v: number, digits = 2) => Number(v.toFixed(digits));

async function runOnce(
  options: BenchOptions,
  concurrency: number,
  ends: Endpoints,
  shape: ModelShape,
  workload: Workload,
  local: LocalModel | undefined,
): Promise<BenchReport> {
  const streams = options.streams ?? Math.max(1, Math.ceil(concurrency / 16));
  const client = createClient(options.protocol, {
    ...ends.target,
    concurrency,
    streams,
    outputs: shape.outputs.map((o) => o.name),
    headers: options.headers,
    decoupled: shape.decoupled,
  });
  const readStatisticsNow = () => readStatistics(ends.httpBase, options.model, options.headers);
  // The server's figures (statistics, CPU) and the client's CPU are read as the window
  // opens and closes, so that they cover what the client's figures cover: the window.
  const sequenceLength = shape.sequences ? options.sequenceLength : undefined;
  let cpuStart: number | undefined;
  let clientStart = process.cpuUsage();
  let before: Promise<StatisticsReading> | undefined;
  const measureAt = setTimeout(() => {
    if (ends.server !== undefined) cpuStart = processCpuMs(ends.server.pid);
    clientStart = process.cpuUsage();
    before = readStatisticsNow();
  }, options.warmupSeconds * 1000);
  let cpuEnd: number | undefined;
  let clientUs = 0;
  let after: Promise<StatisticsReading> | undefined;
  const takeEndReadings = (): void => {
    if (after !== undefined) return;
    if (ends.server !== undefined) cpuEnd = processCpuMs(ends.server.pid);
    const used = process.cpuUsage(clientStart);
    clientUs = used.user + used.system;
    after = readStatisticsNow();
  };
  const stopAt = setTimeout(takeEndReadings, (options.warmupSeconds + options.seconds) * 1000);
  const result = await runLoad(client, workload, {
    lanes: concurrency,
    sequenceLength,
    rate: options.rate,
    seconds: options.seconds,
    warmupSeconds: options.warmupSeconds,
    idBase: BigInt(randomBytes(4).readUInt32BE(0) + 1) * 2n ** 24n,
    keepOutputs: options.verify,
    ...(options.quiet || options.json || !process.stderr.isTTY
      ? {}
      : {
          progress: (elapsed, answered, recorder) => {
            const [p99] = recorder.percentiles([99]);
            process.stderr.write(
              `\r  ${elapsed.toFixed(0)} s: ${(answered / elapsed).toFixed(0)} requests/s, p99 ${p99!.toFixed(1)} ms, errors ${recorder.failures}   `,
            );
          },
        }),
  });
  clearTimeout(measureAt);
  clearTimeout(stopAt);
  // A busy event loop may finish the run before the window's timer: read them now.
  takeEndReadings();
  if (!options.quiet && !options.json && process.stderr.isTTY) process.stderr.write("\r\x1b[K");
  await client.close();
  // The run outlasts its warm-up, so the window's opening has been read (the fallback
  // only satisfies the types).
  const [start, end] = await Promise.all([before ?? readStatisticsNow(), after!]);
  const server: ServerSide | undefined = serverSide(start.snapshot, end.snapshot);
  const { recorder } = result;
  const [p50, p90, p99, max] = recorder.percentiles([50, 90, 99, 100]);
  // The window's answers over the window; the CPU read over the window, per answer in it.
  const answered = result.answeredInWindow;
  const requestsPerSecond = answered / result.seconds;

  let limit: InProcessLimit | undefined;
  if (local !== undefined && server !== undefined && server.batches.size > 0) {
    const budget = Math.max(40, Math.floor((options.limitSeconds * 1000) / server.batches.size));
    limit = await inProcessLimit(local, workload, server.batches, budget);
  }
  const oracle =
    local !== undefined && options.verify
      ? await checkAgainstOracle(local, workload, result.exchanges)
      : undefined;
  const cpuMs = cpuStart !== undefined && cpuEnd !== undefined ? cpuEnd - cpuStart : undefined;
  // Rows per request: the model's batch rows a request brings (1 for these workloads).
  return {
    model: options.model,
    protocol: options.protocol,
    concurrency,
    sequenceLength,
    rate: options.rate,
    seconds: round(result.seconds, 3),
    requests: answered,
    requestsPerSecond: round(requestsPerSecond, 1),
    latencyMs: { p50: round(p50!, 3), p90: round(p90!, 3), p99: round(p99!, 3), max: round(max!, 3) },
    errors: Object.fromEntries(recorder.errors),
    errorMessages: Object.fromEntries(recorder.firstMessages),
    server:
      server === undefined
        ? undefined
        : {
            batches: Object.fromEntries([...server.batches].sort((a, b) => b[1] - a[1])),
            meanBatch: round(server.meanBatch),
            queueMs: round(server.queueMs, 3),
            computeMs: round(server.computeMs, 3),
            cpuMsPerRequest: cpuMs === undefined || answered === 0 ? undefined : round(cpuMs / answered, 4),
          },
    ...(server === undefined && end.refused !== undefined ? { statisticsRefused: end.refused } : {}),
    clientCpuMsPerRequest: answered === 0 ? 0 : round(clientUs / 1000 / answered, 4),
    inProcess:
      limit === undefined
        ? undefined
        : {
            rowsPerSecond: round(limit.rowsPerSecond, 0),
            ratio: round(requestsPerSecond / limit.rowsPerSecond, 3),
          },
    oracle,
  };
}

export function formatReport(report: BenchReport): string {
  const lines = [
    `${report.model} over ${report.protocol}: ${report.concurrency} ${report.sequenceLength === undefined ? "clients" : `sequences of ${report.sequenceLength} steps`}, ${report.rate === undefined ? "closed loop" : `${report.rate} requests/s offered`}, ${report.seconds} s`,
    `  requests/s   ${report.requestsPerSecond}  (${report.requests} answered in the window)`,
    `  latency ms   p50 ${report.latencyMs.p50}  p90 ${report.latencyMs.p90}  p99 ${report.latencyMs.p99}  max ${report.latencyMs.max}`,
    `  errors       ${
      Object.keys(report.errors).length === 0
        ? "none"
        : Object.entries(report.errors)
            .map(([k, n]) => `${k}: ${n}`)
            .join(", ")
    }`,
    ...Object.entries(report.errorMessages).map(([kind, message]) => `    first ${kind}: ${message}`),
  ];
  if (report.server !== undefined) {
    const sizes = Object.entries(report.server.batches)
      .slice(0, 12)
      .map(([size, n]) => `${size}:${n}`)
      .join(" ");
    lines.push(
      `  batches      mean ${report.server.meanBatch}  (size:executions ${sizes}${Object.keys(report.server.batches).length > 12 ? " …" : ""})`,
      `  server       queue ${report.server.queueMs} ms, compute ${report.server.computeMs} ms per request${report.server.cpuMsPerRequest === undefined ? "" : `; CPU ${report.server.cpuMsPerRequest} ms per request`}`,
    );
  } else if (report.statisticsRefused !== undefined) {
    lines.push(
      `  server       statistics refused (${report.statisticsRefused}): no batch sizes or queue/compute split`,
    );
  }
  lines.push(`  client       CPU ${report.clientCpuMsPerRequest} ms per request (this load generator)`);
  if (report.inProcess !== undefined) {
    lines.push(
      `  in-process   ${report.inProcess.rowsPerSecond} rows/s at these batch sizes: ${(report.inProcess.ratio * 100).toFixed(1)} % reached`,
    );
  }
  if (report.oracle !== undefined) {
    const failedSteps = failedStepCount(report);
    const unchecked = failedSteps === 0 ? "" : `; ${failedSteps} failed steps not checked`;
    lines.push(
      report.oracle.mismatches === 0
        ? `  oracle       ${report.oracle.checked} outputs checked, all equal to ONNX Runtime alone${unchecked}`
        : `  oracle       ${report.oracle.mismatches} of ${report.oracle.checked} outputs differ: ${report.oracle.examples.join("; ")}${unchecked}`,
    );
  }
  if (report.requests === 0) lines.push("  nothing was answered: the run measured nothing");
  return lines.join("\n");
}

/** Runs `seqserve bench …`; resolves with the process exit code. */
export async function benchCommand(argv: readonly string[]): Promise<number> {
  let options: BenchOptions | "help";
  try {
    options = parseBenchArgs(argv);
  } catch (error) {
    if (!(error instanceof BenchUsageError)) throw error;
    process.stderr.write(`seqserve bench: ${error.message}\nRun 'seqserve bench --help' for the options.\n`);
    return 2;
  }
  if (options === "help") {
    process.stdout.write(`${BENCH_HELP}\n`);
    return 0;
  }
  let reports: BenchReport[];
  try {
    reports = await runBench(options);
  } catch (error) {
    // Options that do not fit the model (a protocol it cannot be served over): 2. A server
    // that cannot be reached, a model it does not serve, a file that cannot be read: 1.
    // Either way the message, not a stack.
    process.stderr.write(`seqserve bench: ${error instanceof Error ? error.message : String(error)}\n`);
    return error instanceof BenchUsageError ? 2 : 1;
  }
  if (options.json)
    process.stdout.write(`${JSON.stringify(options.sweep === undefined ? reports[0] : reports, null, 2)}\n`);
  else process.stdout.write(`${reports.map(formatReport).join("\n\n")}\n`);
  return reports.some(failedRun) ? 1 : 0;
}

/**
 * A run that proves nothing fails the command: nothing answered; or, with --verify, an
 * answer unlike the model's alone, or a step that failed (its answer was not checked), or
 * nothing checked at all.
 */
export function failedRun(report: BenchReport): boolean {
  if (report.requests === 0) return true;
  const oracle = report.oracle;
  if (oracle === undefined) return false;
  return oracle.mismatches > 0 || oracle.checked === 0 || failedStepCount(report) > 0;
}

/** Steps sent that failed: an open loop's slots it never sent are no step of the model's. */
function failedStepCount(report: BenchReport): number {
  let failed = 0;
  for (const [kind, count] of Object.entries(report.errors)) if (kind !== NOT_SENT) failed += count;
  return failed;
}

/** The benchmark as a library call (tests and the comparison script use it). */
export async function runBench(options: BenchOptions): Promise<BenchReport[]> {
  if (options.chart !== undefined && !existsSync(dirname(resolve(options.chart)))) {
    // Found out before the runs, not after them, with their reports lost.
    throw new BenchUsageError(`--chart ${options.chart}: its folder does not exist`);
  }
  const ends = await endpoints(options);
  let local: LocalModel | undefined;
  try {
    const shape = await describeModel(ends.httpBase, options.model, options.headers);
    if (shape.sequences && options.sequenceLength === 1 && !ONE_REQUEST_SEQUENCES.has(options.protocol)) {
      // START and END in one request: these protocols have no way to say both, and each
      // sequence would be left open on the server until its idle timeout or expiry.
      throw new BenchUsageError(
        `--sequence-length 1: ${options.protocol} cannot start and end a sequence in one request; use 2 or more, or ${[...ONE_REQUEST_SEQUENCES].join(", ")}`,
      );
    }
    if (shape.decoupled && !DECOUPLED_PROTOCOLS.includes(options.protocol)) {
      // Every request would be refused (501 / UNIMPLEMENTED): said once, before the run.
      throw new BenchUsageError(
        `model '${options.model}' is decoupled (several responses per request): ${options.protocol} cannot carry its responses; use --protocol ${DECOUPLED_PROTOCOLS.join(" or ")}`,
      );
    }
    const workload = new Workload(shape.inputs, {
      values: options.values,
      shapes: options.shapes,
      ...(options.wavFile === undefined ? {} : { wavFile: options.wavFile }),
      ...(options.audioInput === undefined ? {} : { audioInput: options.audioInput }),
      seed: options.seed,
    });
    if (options.modelRepository !== undefined) {
      local = await openLocalModel(options.modelRepository, options.model);
      if (local === undefined && options.verify) {
        throw new BenchUsageError(
          `model '${options.model}' is model code: --verify checks answers against the model run alone in ONNX Runtime, which runs only ONNX models`,
        );
      }
    }
    const reports: BenchReport[] = [];
    for (const concurrency of options.sweep ?? [options.concurrency]) {
      reports.push(await runOnce(options, concurrency, ends, shape, workload, local));
    }
    if (options.chart !== undefined) {
      const points: SweepPoint[] = reports.map((r) => ({
        concurrency: r.concurrency,
        requestsPerSecond: r.requestsPerSecond,
        p50Ms: r.latencyMs.p50,
        p99Ms: r.latencyMs.p99,
      }));
      writeFileSync(options.chart, latencyThroughputSvg(`${options.model} over ${options.protocol}`, points));
    }
    return reports;
  } finally {
    await local?.session.release();
    await ends.server?.stop();
  }
}
