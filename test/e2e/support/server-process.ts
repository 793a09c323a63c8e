import { type ChildProcess, spawn } from "node:child_process";
import { fileURLToPath } from "node:url";

// The seqserve command in a child process, for the command-line suites: run to its end,
// or started as a server whose JSON log lines (and the one announcing its ports) are read.

export const ROOT = fileURLToPath(new URL("../../..", import.meta.url));
export const BIN = "bin/seqserve.js";

export interface Exit {
  readonly code: number | null;
  readonly signal: NodeJS.Signals | null;
  readonly stdout: string;
  readonly stderr: string;
}

/** Runs the command to its end. */
export function run(args: readonly string[]): Promise<Exit> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [BIN, ...args], { cwd: ROOT, stdio: ["ignore", "pipe", "pipe"] });
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

  constructor(command: string, args: readonly string[]) {
    this.child = spawn(command, args, { cwd: ROOT, stdio: ["ignore", "pipe", "pipe"] });
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
      this.child.kill("SIGTERM");
      const timer = setTimeout(() => this.child.kill("SIGKILL"), 60_000);
      await this.exit;
      clearTimeout(timer);
    }
    return this.exit;
  }
}
