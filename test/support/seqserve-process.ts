import { type ChildProcess, spawn } from "node:child_process";
import { createServer } from "node:net";
import { fileURLToPath } from "node:url";

// The seqserve command as a user runs it, `node bin/seqserve.js …`, in a child process:
// run to its end, or started as a server that announces itself with one JSON log line.

export const ROOT = fileURLToPath(new URL("../..", import.meta.url));
export const BIN = "bin/seqserve.js";

type Env = Readonly<Record<string, string | undefined>>;

/** Every endpoint on a free loopback port, and JSON logs (so the listening line can be read). */
export const FREE_PORT_FLAGS: readonly string[] = [
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
];

/** A loopback port nobody listens on now. */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const probe = createServer();
    probe.once("error", reject);
    probe.listen(0, "127.0.0.1", () => {
      const address = probe.address();
      probe.close(() => resolve(typeof address === "object" && address !== null ? address.port : 0));
    });
  });
}

export interface Exit {
  readonly code: number | null;
  readonly signal: NodeJS.Signals | null;
  readonly stdout: string;
  readonly stderr: string;
}

/** Runs the command to its end (`env` is added to this process's environment). */
export function run(args: readonly string[], env: Env = {}): Promise<Exit> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [BIN, ...args], {
      cwd: ROOT,
      env: { ...process.env, ...env },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let stdout = "";
    let stderr = "";
    child.stdout.setEncoding("utf8").on("data", (chunk: string) => (stdout += chunk));
    child.stderr.setEncoding("utf8").on("data", (chunk: string) => (stderr += chunk));
    child.once("error", reject);
    child.once("close", (code, signal) => resolve({ code, signal, stdout, stderr }));
  });
}

export interface ListeningLine {
  readonly event: "listening";
  readonly http_port: number | null;
  readonly grpc_port: number | null;
  readonly metrics_port: number | null;
  readonly sagemaker_port: number | null;
}

/** A running server process started with JSON logs. */
export class ServerProcess {
  readonly child: ChildProcess;
  readonly lines: Record<string, unknown>[] = [];
  /** Lines of standard output that were not JSON objects. */
  readonly notJson: string[] = [];
  readonly exit: Promise<Exit>;
  readonly listening: Promise<ListeningLine>;
  #stdout = "";
  #stderr = "";

  readonly #group: boolean;

  /**
   * `env` is added to this process's environment, or to `options.baseEnv` when given.
   * `options.group` runs the command in its own process group, signalled as a whole, as a
   * terminal signals what it runs (for launchers such as npx, which run the server as a
   * child of their own).
   */
  constructor(
    command: string,
    args: readonly string[],
    env: Env = {},
    options: { readonly cwd?: string; readonly baseEnv?: Env; readonly group?: boolean } = {},
  ) {
    this.#group = options.group === true;
    this.child = spawn(command, args, {
      cwd: options.cwd ?? ROOT,
      env: { ...(options.baseEnv ?? process.env), ...env },
      stdio: ["ignore", "pipe", "pipe"],
      detached: this.#group,
    });
    let onListening!: (line: ListeningLine) => void;
    let notListening!: (error: Error) => void;
    this.listening = new Promise((resolve, reject) => {
      onListening = resolve;
      notListening = reject;
    });
    let partial = "";
    this.child.stdout!.setEncoding("utf8").on("data", (chunk: string) => {
      this.#stdout += chunk;
      const parts = (partial + chunk).split("\n");
      partial = parts.pop() ?? "";
      for (const part of parts) {
        if (part.trim() === "") continue;
        let line: Record<string, unknown>;
        try {
          line = JSON.parse(part) as Record<string, unknown>;
        } catch {
          this.notJson.push(part);
          continue;
        }
        this.lines.push(line);
        if (line.event === "listening") onListening(line as unknown as ListeningLine);
      }
    });
    this.child.stderr!.setEncoding("utf8").on("data", (chunk: string) => (this.#stderr += chunk));
    this.exit = new Promise((resolve, reject) => {
      this.child.once("error", reject);
      this.child.once("close", (code, signal) => {
        const exit = { code, signal, stdout: this.#stdout, stderr: this.#stderr };
        notListening(new Error(`the server exited before listening: ${JSON.stringify(exit)}`));
        resolve(exit);
      });
    });
  }

  /** SIGTERM, and its exit; a process still running after a generous wait is killed (and the exit shows it). */
  async stop(): Promise<Exit> {
    if (this.child.exitCode === null && this.child.signalCode === null) {
      this.#signal("SIGTERM");
      const timer = setTimeout(() => this.#signal("SIGKILL"), 60_000);
      await this.exit;
      clearTimeout(timer);
    }
    return this.exit;
  }

  #signal(signal: NodeJS.Signals): void {
    if (this.#group && this.child.pid !== undefined) process.kill(-this.child.pid, signal);
    else this.child.kill(signal);
  }
}
