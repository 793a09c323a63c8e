import { type ChildProcess, spawn } from "node:child_process";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";

// A seqserve started as its own process (as users run it), so the load generator does not
// share its event loop. Ports are picked by the server and read from its "listening" line.

export interface ServerProcess {
  readonly httpPort: number;
  readonly grpcPort: number;
  readonly metricsPort: number;
  /** Undefined unless started with --allow-sagemaker true. */
  readonly sagemakerPort: number | undefined;
  stop(): Promise<void>;
}

const BIN = fileURLToPath(new URL("../bin/seqserve.js", import.meta.url));

export async function startServerProcess(
  repository: string,
  extraArgs: readonly string[] = [],
): Promise<ServerProcess> {
  // BENCH_NODE_ARGS adds Node flags to the server process (e.g. "--cpu-prof" to profile it).
  const nodeArgs = (process.env.BENCH_NODE_ARGS ?? "").split(" ").filter((a) => a !== "");
  const child: ChildProcess = spawn(
    process.execPath,
    [
      ...nodeArgs,
      BIN,
      "--model-repository",
      repository,
      "--host",
      "127.0.0.1",
      "--http-port",
      "0",
      "--grpc-port",
      "0",
      "--metrics-port",
      "0",
      "--log-format",
      "json",
      "--log-level",
      "info",
      ...extraArgs,
    ],
    { stdio: ["ignore", "pipe", "inherit"] },
  );
  const lines = createInterface({ input: child.stdout! });
  const ports = await new Promise<{
    http: number;
    grpc: number;
    metrics: number;
    sagemaker: number | undefined;
  }>((resolve, reject) => {
    child.once("exit", (code) => reject(new Error(`seqserve exited with code ${code} before listening`)));
    lines.on("line", (line) => {
      try {
        const entry = JSON.parse(line) as {
          event?: string;
          http_port?: number;
          grpc_port?: number;
          metrics_port?: number;
          sagemaker_port?: number | null;
          msg?: string;
          level?: number;
        };
        if (entry.level !== undefined && entry.level >= 50) process.stderr.write(`${entry.msg}\n`);
        if (entry.event === "listening")
          resolve({
            http: entry.http_port!,
            grpc: entry.grpc_port!,
            metrics: entry.metrics_port!,
            sagemaker: entry.sagemaker_port ?? undefined,
          });
      } catch {}
    });
  });
  return {
    httpPort: ports.http,
    grpcPort: ports.grpc,
    metricsPort: ports.metrics,
    sagemakerPort: ports.sagemaker,
    stop: () =>
      new Promise<void>((resolve) => {
        child.once("exit", () => resolve());
        child.kill("SIGTERM");
      }),
  };
}
