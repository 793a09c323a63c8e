import { parseArgs } from "node:util";
import { PROTOCOLS, type Protocol } from "./clients/bench-client.ts";

// `seqserve bench` flags → options, checked once; a bad value stops with a message naming it.

export interface BenchOptions {
  readonly model: string;
  /** Start a server on this repository (and open the model here for the limit and the oracle). */
  readonly modelRepository: string | undefined;
  /** Or use a running server: its HTTP base URL, gRPC and SageMaker addresses. */
  readonly url: string | undefined;
  readonly grpc: string | undefined;
  readonly sagemaker: string | undefined;
  /** Extra flags for the server the benchmark starts. */
  readonly serverArgs: readonly string[];
  /** Node flags for the server the benchmark starts (e.g. --cpu-prof). */
  readonly serverNodeArgs: readonly string[];
  readonly protocol: Protocol;
  readonly concurrency: number;
  readonly sequenceLength: number;
  readonly streams: number | undefined;
  readonly rate: number | undefined;
  readonly seconds: number;
  readonly warmupSeconds: number;
  /** Seconds spent timing ONNX Runtime alone at the batch sizes the run formed. */
  readonly limitSeconds: number;
  readonly values: ReadonlyMap<string, readonly number[]>;
  readonly shapes: ReadonlyMap<string, readonly number[]>;
  readonly wavFile: string | undefined;
  readonly audioInput: string | undefined;
  readonly seed: number;
  readonly verify: boolean;
  readonly json: boolean;
  readonly quiet: boolean;
  readonly sweep: readonly number[] | undefined;
  readonly chart: string | undefined;
  /** Sent with every request (e.g. an API key: "authorization: Bearer …"). */
  readonly headers: Readonly<Record<string, string>>;
}

export class BenchUsageError extends Error {
  override name = "BenchUsageError";
}

export const BENCH_HELP = `Usage: seqserve bench --model <name> (--model-repository <dir> | --url <http://host:port>) [options]

Loads a model through one protocol and reports requests/s, latency percentiles, errors by
kind, the server's batch sizes and queue/compute split, and how close the run came to
ONNX Runtime alone in this process at those batch sizes.

  --model <name>               the model to load (required)
  --model-repository <dir>     start a seqserve on this repository (free ports) and stop it after
  --url <http://host:port>     or use a running server's HTTP endpoint (metadata, statistics)
  --grpc <host:port>           its gRPC endpoint (grpc, grpc-stream, tfs-grpc)
  --sagemaker <host:port>      its SageMaker endpoint (sagemaker, sagemaker-stream)
  --server-args "<flags>"      more flags for the server started with --model-repository
  --server-node-args "<flags>" Node flags for that server (e.g. "--cpu-prof --cpu-prof-dir=prof")
  --protocol <p>               ${PROTOCOLS.join(", ")} (default http-binary);
                               a decoupled model (several responses per request): ws or grpc-stream
  --concurrency <n>            requests in flight; for a sequence model, live sequences (default 64)
  --sequence-length <n>        steps per sequence (default 50)
  --streams <n>                grpc-stream: streams carrying the sequences (default concurrency / 16)
  --rate <r>                   open loop at r requests/s (default: closed loop)
  --duration <s>               measured seconds (default 10)
  --warmup <s>                 seconds before measuring (default 2)
  --limit-duration <s>         seconds spent timing the in-process limit after the run (default 3)
  --input <name>=<v>[,<v>...]  a fixed value for an input (e.g. --input sr=16000)
  --shape <name>=<d>[,<d>...]  the client shape of an input with variable dims
  --data random|<file.wav>     input data: seeded random (default), or a WAV file's audio; made once,
                               up to 256 sets of inputs the requests take turns with
  --audio-input <name>         the input the WAV audio feeds (default: the first FP32 input)
  --seed <n>                   random data seed (default 1)
  --verify                     check every answer against ONNX Runtime in this process (needs --model-repository)
  --sweep <n>,<n>,...          run once per concurrency and report each
  --chart <file.svg>           with --sweep: write a latency-versus-throughput chart
  --header "<name>: <value>"   send this header (gRPC: metadata) with every request, e.g. an API key (repeatable);
                               the model's metadata, config and statistics are read with it too
  --json                       print the report as JSON
  --quiet                      no progress line`;

function whole(name: string, value: string | undefined, fallback: number, min = 1): number {
  if (value === undefined) return fallback;
  const n = Number(value);
  if (!Number.isInteger(n) || n < min)
    throw new BenchUsageError(`--${name} expects a whole number >= ${min}, got '${value}'`);
  return n;
}

function positive(name: string, value: string | undefined, orZero = false): number | undefined {
  if (value === undefined) return undefined;
  const n = Number(value);
  if (value.trim() === "" || !Number.isFinite(n) || n < 0 || (n === 0 && !orZero)) {
    const what = orZero ? "a number of 0 or more" : "a positive number";
    throw new BenchUsageError(`--${name} expects ${what}, got '${value}'`);
  }
  return n;
}

function assignments(name: string, values: readonly string[]): Map<string, number[]> {
  const out = new Map<string, number[]>();
  for (const value of values) {
    const eq = value.indexOf("=");
    const numbers = value
      .slice(eq + 1)
      .split(",")
      .map((v) => Number(v.trim()));
    if (eq < 1 || numbers.some((n) => !Number.isFinite(n))) {
      throw new BenchUsageError(`--${name} expects <input>=<number>[,<number>...], got '${value}'`);
    }
    out.set(value.slice(0, eq), numbers);
  }
  return out;
}

/** Options whose value is a list of flags, so it starts with a dash. */
const FLAG_LISTS = new Set(["--server-args", "--server-node-args"]);

/**
 * `--server-args "<flags>"` as `--server-args=<flags>`: parseArgs refuses a value that
 * starts with a dash unless it is joined with `=`, and these values always do.
 */
function joinFlagLists(argv: readonly string[]): string[] {
  const out: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    if (arg === "--") {
      // The end of the options: what follows is left to parseArgs as it is.
      out.push(...argv.slice(i));
      break;
    }
    if (FLAG_LISTS.has(arg) && i + 1 < argv.length) out.push(`${arg}=${argv[++i]}`);
    else out.push(arg);
  }
  return out;
}

export function parseBenchArgs(argv: readonly string[]): BenchOptions | "help" {
  let values: Record<string, string | string[] | boolean | undefined>;
  try {
    ({ values } = parseArgs({
      args: joinFlagLists(argv),
      strict: true,
      allowPositionals: false,
      options: {
        model: { type: "string" },
        "model-repository": { type: "string" },
        url: { type: "string" },
        grpc: { type: "string" },
        sagemaker: { type: "string" },
        "server-args": { type: "string" },
        "server-node-args": { type: "string" },
        protocol: { type: "string" },
        concurrency: { type: "string" },
        "sequence-length": { type: "string" },
        streams: { type: "string" },
        rate: { type: "string" },
        duration: { type: "string" },
        warmup: { type: "string" },
        "limit-duration": { type: "string" },
        input: { type: "string", multiple: true },
        shape: { type: "string", multiple: true },
        data: { type: "string" },
        "audio-input": { type: "string" },
        seed: { type: "string" },
        verify: { type: "boolean" },
        sweep: { type: "string" },
        chart: { type: "string" },
        header: { type: "string", multiple: true },
        json: { type: "boolean" },
        quiet: { type: "boolean" },
        help: { type: "boolean" },
      },
    }));
  } catch (error) {
    // Node's hint to write '--name=-XYZ' is dropped (most options here take no such value),
    // and its lines become one.
    const message = (error as Error).message.replace(/\s*To specify an option argument.*$/s, "");
    throw new BenchUsageError(message.replace(/\s*\n\s*/g, " "));
  }
  if (values.help === true) return "help";
  const str = (name: string) => values[name] as string | undefined;
  const model = str("model");
  if (model === undefined) throw new BenchUsageError("--model <name> is required");
  const modelRepository = str("model-repository");
  const url = str("url");
  if ((modelRepository === undefined) === (url === undefined)) {
    throw new BenchUsageError(
      "give either --model-repository <dir> (the benchmark starts a server) or --url <http://host:port>",
    );
  }
  const protocol = (str("protocol") ?? "http-binary") as Protocol;
  if (!PROTOCOLS.includes(protocol)) {
    throw new BenchUsageError(`--protocol must be one of ${PROTOCOLS.join(", ")}, got '${protocol}'`);
  }
  const verify = values.verify === true;
  if (verify && modelRepository === undefined) throw new BenchUsageError("--verify needs --model-repository");
  const data = str("data");
  const sweep = str("sweep")
    ?.split(",")
    .map((v) => whole("sweep", v.trim(), 1));
  const chart = str("chart");
  if (chart !== undefined && sweep === undefined) throw new BenchUsageError("--chart needs --sweep");
  return {
    model,
    modelRepository,
    url,
    grpc: str("grpc"),
    sagemaker: str("sagemaker"),
    serverArgs: (str("server-args") ?? "").split(/\s+/).filter((a) => a !== ""),
    serverNodeArgs: (str("server-node-args") ?? "").split(/\s+/).filter((a) => a !== ""),
    protocol,
    concurrency: whole("concurrency", str("concurrency"), 64),
    sequenceLength: whole("sequence-length", str("sequence-length"), 50),
    streams: str("streams") === undefined ? undefined : whole("streams", str("streams"), 1),
    rate: positive("rate", str("rate")),
    seconds: positive("duration", str("duration")) ?? 10,
    warmupSeconds: positive("warmup", str("warmup"), true) ?? 2,
    limitSeconds: positive("limit-duration", str("limit-duration")) ?? 3,
    values: assignments("input", (values.input as string[] | undefined) ?? []),
    shapes: assignments("shape", (values.shape as string[] | undefined) ?? []),
    wavFile: data === undefined || data === "random" ? undefined : data,
    audioInput: str("audio-input"),
    seed: whole("seed", str("seed"), 1, 0),
    verify,
    json: values.json === true,
    quiet: values.quiet === true,
    sweep,
    chart,
    headers: readHeaders((values.header as string[] | undefined) ?? []),
  };
}

function readHeaders(entries: readonly string[]): Record<string, string> {
  const headers: Record<string, string> = {};
  for (const entry of entries) {
    const colon = entry.indexOf(":");
    if (colon < 1) throw new BenchUsageError(`--header expects "<name>: <value>", got '${entry}'`);
    headers[entry.slice(0, colon).trim().toLowerCase()] = entry.slice(colon + 1).trim();
  }
  return headers;
}
