import { copyFileSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { type RunningServer, startServer } from "../../../src/app/server.ts";
import { DEFAULT_SERVER_OPTIONS, type ServerOptions } from "../../../src/config/server-options.ts";
import { type Logger, silentLogger } from "../../../src/observability/logger.ts";
import { SILERO_PATH } from "../../support/silero-oracle.ts";

// seqserve started as an OpenVINO Model Server user starts it: an OVMS config.json in a
// temporary folder (model folders beside it), on loopback ephemeral ports, in this process.

export interface OvmsModel {
  /** The entry's `config` (name and base_path are filled in). */
  readonly config?: Record<string, unknown>;
  /** ONNX bytes, or a path to copy; per version (a single value is version 1); none for a MediaPipe graph. */
  readonly onnx?: Uint8Array | string | Readonly<Record<number, Uint8Array | string>>;
  /** Other files (a graph.pbtxt), by path from the config file's folder: their texts. */
  readonly files?: Readonly<Record<string, string>>;
  /** The ONNX file's name in each version folder (OVMS takes any); model.onnx by default. */
  readonly fileName?: string;
  /** Other files written in each version folder (text, or bytes), by name: mapping_config.json, a second model. */
  readonly versionFiles?: Readonly<Record<string, string | Uint8Array>>;
}

export interface OvmsServer {
  readonly server: RunningServer;
  readonly url: string;
  readonly grpcPort: number;
  readonly dir: string;
  readonly configPath: string;
  /** Rewrites config.json with these models (and their folders). */
  write(models: Readonly<Record<string, OvmsModel>>): void;
  stop(): Promise<void>;
}

/** The Silero VAD v5 model served statefully, as an OVMS user lists it. */
export const SILERO_OVMS: OvmsModel = { config: { stateful: true }, onnx: SILERO_PATH };

export async function startOvmsServer(
  models: Readonly<Record<string, OvmsModel>>,
  options: Partial<ServerOptions> = {},
  logger: Logger = silentLogger(),
): Promise<OvmsServer> {
  const dir = mkdtempSync(join(tmpdir(), "seqserve-ovms-"));
  const configPath = join(dir, "config.json");
  const write = (all: Readonly<Record<string, OvmsModel>>): void => {
    const list = Object.entries(all).map(([name, model]) => {
      const base = join(dir, name);
      const versions =
        typeof model.onnx === "string" || model.onnx instanceof Uint8Array
          ? { 1: model.onnx }
          : (model.onnx ?? {});
      for (const [path, text] of Object.entries(model.files ?? {})) {
        mkdirSync(dirname(join(dir, path)), { recursive: true });
        writeFileSync(join(dir, path), text);
      }
      for (const [version, onnx] of Object.entries(versions)) {
        mkdirSync(join(base, version), { recursive: true });
        const file = join(base, version, model.fileName ?? "model.onnx");
        if (typeof onnx === "string") copyFileSync(onnx, file);
        else writeFileSync(file, onnx);
        for (const [name, content] of Object.entries(model.versionFiles ?? {}))
          writeFileSync(join(base, version, name), content);
      }
      return { config: { name, base_path: name, ...model.config } };
    });
    writeFileSync(configPath, JSON.stringify({ model_config_list: list }, null, 2));
  };
  write(models);
  const server = await startServer(
    {
      ...DEFAULT_SERVER_OPTIONS,
      ovmsConfigs: [configPath],
      host: "127.0.0.1",
      httpPort: 0,
      grpcPort: 0,
      metricsPort: undefined,
      exitTimeoutSecs: 1,
      configPollSecs: 0,
      ...options,
    },
    { logger },
  );
  return {
    server,
    url: `http://127.0.0.1:${server.httpPort}`,
    grpcPort: server.grpcPort ?? 0,
    dir,
    configPath,
    write,
    async stop() {
      await server.stop();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
