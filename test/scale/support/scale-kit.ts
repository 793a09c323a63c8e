import { type ChildProcess, execFileSync, spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import {
  BIN,
  FREE_PORT_FLAGS,
  freePort,
  type ListeningLine,
  ROOT,
  ServerProcess,
} from "../../support/seqserve-process.ts";

// Several seqserve replicas sharing a Redis state store, behind nginx, as
// deploy/nginx/README.md runs them: real redis-server and nginx processes (Debian's
// packages, installed by .ci/run) on free loopback ports, and replicas started as a user
// starts them (`node bin/seqserve.js …`). Without redis-server or nginx a developer's
// machine skips these tests, saying why; CI must have them.

/** Why the scale tests cannot run here (undefined: they can). In CI a missing tool is a failure. */
export function missingTools(tools: readonly string[]): string | undefined {
  const missing = tools.filter((tool) => {
    try {
      execFileSync("sh", ["-c", `command -v ${tool} || test -x /usr/sbin/${tool}`], { stdio: "ignore" });
      return false;
    } catch {
      return true;
    }
  });
  if (missing.length === 0) return undefined;
  const reason = `${missing.join(" and ")} not installed (Debian packages redis-server, nginx; .ci/run installs them)`;
  if (process.env.CI !== undefined && process.env.CI !== "" && process.env.CI !== "false") {
    throw new Error(`the scale-out tests must run in CI, but ${reason}`);
  }
  process.stdout.write(`skipping the scale-out tests: ${reason}\n`);
  return reason;
}

const pause = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

function exited(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => child.once("exit", () => resolve()));
}

/** A redis-server of the test's own, without persistence unless asked. */
export class RedisServer {
  readonly port: number;
  readonly #dir = mkdtempSync(join(tmpdir(), "seqserve-redis-"));
  #child: ChildProcess | undefined;

  private constructor(port: number) {
    this.port = port;
  }

  static async start(): Promise<RedisServer> {
    const redis = new RedisServer(await freePort());
    await redis.#spawn();
    return redis;
  }

  get url(): string {
    return `redis://127.0.0.1:${this.port}`;
  }

  async #spawn(): Promise<void> {
    const child = spawn(
      "redis-server",
      [
        "--port",
        String(this.port),
        "--bind",
        "127.0.0.1",
        "--save",
        "",
        "--appendonly",
        "no",
        "--dir",
        this.#dir,
      ],
      { stdio: "ignore" },
    );
    this.#child = child;
    for (let i = 0; i < 200; i++) {
      try {
        if (
          execFileSync("redis-cli", ["-p", String(this.port), "ping"], { encoding: "utf8" }).trim() === "PONG"
        )
          return;
      } catch {}
      await pause(25);
    }
    throw new Error(`redis-server on port ${this.port} did not start`);
  }

  /** Stops it (SIGKILL: nothing is saved) and starts it again, empty, after `downMs`. */
  async restart(downMs = 0): Promise<void> {
    const child = this.#child!;
    child.kill("SIGKILL");
    await exited(child);
    if (downMs > 0) await pause(downMs);
    await this.#spawn();
  }

  /** Freezes it (SIGSTOP): connections stay open, nothing is answered until resume(). */
  pause(): void {
    this.#child!.kill("SIGSTOP");
  }

  resume(): void {
    this.#child!.kill("SIGCONT");
  }

  cli(...args: string[]): string {
    return execFileSync("redis-cli", ["-p", String(this.port), ...args], { encoding: "utf8" }).trim();
  }

  async stop(): Promise<void> {
    const child = this.#child;
    if (child !== undefined) {
      child.kill("SIGKILL");
      await exited(child);
    }
    rmSync(this.#dir, { recursive: true, force: true });
  }
}

export interface ReplicaPorts {
  readonly http: number;
  readonly grpc: number;
  /** Replicas started with `--allow-sagemaker true`. */
  readonly sagemaker?: number;
}

/**
 * nginx running deploy/nginx/nginx.conf as shipped, with only its listening ports and the
 * replicas' ports put in.
 */
export class Nginx {
  readonly httpPort: number;
  readonly grpcPort: number;
  readonly sagemakerPort: number;
  readonly #dir = mkdtempSync(join(tmpdir(), "seqserve-nginx-"));
  #child: ChildProcess | undefined;

  private constructor(httpPort: number, grpcPort: number, sagemakerPort: number) {
    this.httpPort = httpPort;
    this.grpcPort = grpcPort;
    this.sagemakerPort = sagemakerPort;
  }

  static async start(replicas: readonly ReplicaPorts[]): Promise<Nginx> {
    const nginx = new Nginx(await freePort(), await freePort(), await freePort());
    nginx.#render(replicas);
    const child = spawn(
      existsExecutable("nginx") ?? "/usr/sbin/nginx",
      [
        "-p",
        nginx.#dir,
        "-c",
        join(nginx.#dir, "nginx.conf"),
        "-g",
        `daemon off; pid ${join(nginx.#dir, "nginx.pid")}; error_log ${join(nginx.#dir, "error.log")} warn;`,
      ],
      { stdio: ["ignore", "ignore", "pipe"] },
    );
    let stderr = "";
    child.stderr!.setEncoding("utf8").on("data", (chunk: string) => (stderr += chunk));
    nginx.#child = child;
    for (let i = 0; i < 200; i++) {
      if (child.exitCode !== null) throw new Error(`nginx did not start: ${stderr}`);
      if (await listening(nginx.httpPort)) return nginx;
      await pause(25);
    }
    throw new Error(`nginx did not start listening: ${stderr}`);
  }

  /** The shipped configuration with this test's ports. */
  #render(replicas: readonly ReplicaPorts[]): void {
    let config = readFileSync(join(ROOT, "deploy/nginx/nginx.conf"), "utf8");
    const servers = (port: (r: ReplicaPorts) => number) =>
      replicas.map((r) => `        server 127.0.0.1:${port(r)} max_fails=1 fail_timeout=5s;`).join("\n");
    config = config.replace(
      /(upstream seqserve_http \{\n\s*hash [^\n]+\n)(?:\s*server [^\n]+\n)+/,
      `$1${servers((r) => r.http)}\n`,
    );
    config = config.replace(
      /(upstream seqserve_grpc \{\n\s*hash [^\n]+\n)(?:\s*server [^\n]+\n)+/,
      `$1${servers((r) => r.grpc)}\n`,
    );
    // Replicas without SageMaker: its upstream keeps the HTTP ports (nginx needs servers).
    config = config.replace(
      /(upstream seqserve_sagemaker \{\n\s*hash [^\n]+\n)(?:\s*server [^\n]+\n)+/,
      `$1${servers((r) => r.sagemaker ?? r.http)}\n`,
    );
    config = config.replace("listen 9000;", `listen 127.0.0.1:${this.httpPort};`);
    config = config.replace("listen 9080;", `listen 127.0.0.1:${this.sagemakerPort};`);
    config = config.replace("listen 9001 http2;", `listen 127.0.0.1:${this.grpcPort} http2;`);
    writeFileSync(join(this.#dir, "nginx.conf"), config);
  }

  /** New upstreams, as an operator adds a replica: the configuration is reloaded (SIGHUP). */
  async reload(replicas: readonly ReplicaPorts[]): Promise<void> {
    this.#render(replicas);
    this.#child!.kill("SIGHUP");
    // The old workers finish their requests; new ones take the new upstreams.
    await pause(300);
  }

  async stop(): Promise<void> {
    const child = this.#child;
    if (child !== undefined) {
      child.kill("SIGTERM");
      await exited(child);
    }
    rmSync(this.#dir, { recursive: true, force: true });
  }
}

function existsExecutable(name: string): string | undefined {
  try {
    return execFileSync("sh", ["-c", `command -v ${name}`], { encoding: "utf8" }).trim() || undefined;
  } catch {
    return undefined;
  }
}

async function listening(port: number): Promise<boolean> {
  try {
    await fetch(`http://127.0.0.1:${port}/`, { signal: AbortSignal.timeout(500) });
    return true;
  } catch {
    return false;
  }
}

/** Where a replica's models are: a model repository's folder, or an OVMS config.json (`--config_path`). */
export type ReplicaModels = string | { readonly configPath: string };

/** A seqserve replica writing sequence state through to `stateStore`. */
export class Replica {
  readonly process: ServerProcess;
  #ports: ListeningLine | undefined;

  constructor(models: ReplicaModels, stateStore: string, extra: readonly string[] = []) {
    this.process = new ServerProcess(process.execPath, [
      BIN,
      ...(typeof models === "string" ? ["--model-repository", models] : ["--config_path", models.configPath]),
      "--state-store",
      stateStore,
      ...FREE_PORT_FLAGS,
      "--exit-timeout-secs",
      "10",
      ...extra,
    ]);
  }

  async ready(): Promise<ReplicaPorts> {
    this.#ports = await this.process.listening;
    return this.ports;
  }

  get ports(): ReplicaPorts {
    const sagemaker = this.#ports!.sagemaker_port;
    return {
      http: this.#ports!.http_port!,
      grpc: this.#ports!.grpc_port!,
      ...(sagemaker === undefined || sagemaker === null ? {} : { sagemaker }),
    };
  }

  get url(): string {
    return `http://127.0.0.1:${this.ports.http}`;
  }

  /** The SageMaker port of a replica started with `--allow-sagemaker true`. */
  get sagemakerPort(): number {
    return this.#ports!.sagemaker_port!;
  }

  /** kill -9: the replica dies mid-request, as a crashed pod does. */
  async kill(): Promise<void> {
    this.process.child.kill("SIGKILL");
    await this.process.exit;
  }

  /** The model's sequences summary (its tier counters included). */
  async summary(model: string): Promise<Record<string, unknown>> {
    const response = await fetch(`${this.url}/v2/models/${model}/sequences`);
    return ((await response.json()) as { summary: Record<string, unknown> }).summary;
  }

  async stop(): Promise<void> {
    await this.process.stop();
  }
}

/** Replicas of `repository` writing through to `stateStore`, one per list of extra flags, all listening. */
export async function startReplicas(
  repository: ReplicaModels,
  stateStore: string,
  flags: readonly (readonly string[])[],
): Promise<Replica[]> {
  const replicas = flags.map((extra) => new Replica(repository, stateStore, extra));
  try {
    await Promise.all(replicas.map((replica) => replica.ready()));
  } catch (error) {
    await stopReplicas(replicas);
    throw error;
  }
  return replicas;
}

export async function stopReplicas(replicas: readonly (Replica | undefined)[]): Promise<void> {
  await Promise.all(replicas.map((replica) => replica?.stop()));
}

/** A test's cluster: its own Redis, and replicas sharing it as their state store. */
export class SharedStoreCluster {
  private constructor(
    readonly redis: RedisServer,
    readonly replicas: readonly Replica[],
  ) {}

  /** One replica per list of extra flags. */
  static async start(
    repository: ReplicaModels,
    flags: readonly (readonly string[])[],
  ): Promise<SharedStoreCluster> {
    const redis = await RedisServer.start();
    try {
      return new SharedStoreCluster(redis, await startReplicas(repository, redis.url, flags));
    } catch (error) {
      await redis.stop();
      throw error;
    }
  }

  async stop(): Promise<void> {
    await stopReplicas(this.replicas);
    await this.redis.stop();
  }
}
