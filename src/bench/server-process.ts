import { type ChildProcess, spawn } from "node:child_process";
import { readFileSync } from "node:fs";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";

// A seqserve the benchmark starts as its own process, as users run it, so the load
// generator never shares its event loop. Ports are picked by the server and read from its
// "listening" log line; its CPU time is read from /proc while the load runs.

/** How many of the server's error lines are shown. */
const SHOWN_SERVER_ERRORS = 5;

export interface ServerPorts {
  readonly http: number | undefined;
  readonly grpc: number | undefined;
  readonly metrics: number | undefined;
  readonly sagemaker: number | undefined;
}

export interface StartedServer {
  readonly ports: ServerPorts;
  readonly pid: number;
  stop(): Promise<void>;
}

const BIN = fileURLToPath(new URL("../../bin/seqserve.js", import.meta.url));

export async function startServerProcess(
  repository: string,
  extraArgs: readonly string[] = [],
  nodeArgs: readonly string[] = [],
  /** The `seqserve` command to run: this package's, or an earlier checkout's. */
  bin: string = BIN,
): Promise<StartedServer> {
  const child: ChildProcess = spawn(
    process.execPath,
    [
      ...nodeArgs,
      bin,
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
      "--allow-sagemaker",
      "true",
      "--sagemaker-port",
      "0",
      "--log-format",
      "json",
      ...extraArgs,
    ],
    { stdio: ["ignore", "pipe", "inherit"] },
  );
  const lines = createInterface({ input: child.stdout! });
  // The server's errors are shown, the first few of them: a model that fails every step
  // logs one per step, and the report gives their count and first message anyway.
  let errorsShown = 0;
  const showError = (message: unknown): void => {
    if (errorsShown < SHOWN_SERVER_ERRORS) process.stderr.write(`seqserve: ${message}\n`);
    else if (errorsShown === SHOWN_SERVER_ERRORS)
      process.stderr.write("seqserve: (more errors in the server's log are not shown)\n");
    errorsShown++;
  };
  const ports = await new Promise<ServerPorts>((resolve, reject) => {
    child.once("exit", (code) => reject(new Error(`seqserve exited with code ${code} before listening`)));
    lines.on("line", (line) => {
      let entry: Record<string, unknown>;
      try {
        entry = JSON.parse(line) as Record<string, unknown>;
      } catch {
        return;
      }
      if (typeof entry.level === "number" && entry.level >= 50) showError(entry.msg);
      const port = (key: string) => (typeof entry[key] === "number" ? (entry[key] as number) : undefined);
      if (entry.event === "listening") {
        resolve({
          http: port("http_port"),
          grpc: port("grpc_port"),
          metrics: port("metrics_port"),
          sagemaker: port("sagemaker_port"),
        });
      }
    });
  });
  return {
    ports,
    pid: child.pid!,
    stop: () =>
      new Promise<void>((resolve) => {
        if (child.exitCode !== null) return resolve();
        child.once("exit", () => resolve());
        child.kill("SIGTERM");
      }),
  };
}

/** CPU time (user + system) a process has used, in ms; undefined where /proc is not readable. */
export function processCpuMs(pid: number): number | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    // Fields after the command name (which may hold spaces, so split after its ')').
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    const ticks = Number(fields[11]) + Number(fields[12]);
    return (ticks * 1000) / 100; // USER_HZ is 100 on Linux
  } catch {
    return undefined;
  }
}
