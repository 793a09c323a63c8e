import { type RunningServer, startServer } from "../../src/app/server.ts";
import { DEFAULT_SERVER_OPTIONS, type ServerOptions } from "../../src/config/server-options.ts";
import { type Logger, silentLogger } from "../../src/observability/logger.ts";
import { type TestModel, tempRepository } from "./model-repository.ts";

// A real seqserve on loopback ephemeral ports, in this process, serving a temporary
// repository of generated models (or a given folder).

export interface TestServer {
  readonly server: RunningServer;
  /** e.g. http://127.0.0.1:41234 */
  readonly url: string;
  readonly grpcPort: number;
  readonly metricsUrl: string;
  /** The first model repository's folder. */
  readonly repositoryPath: string;
  stop(): Promise<void>;
}

/** Passed as startTestServer's logger: the server makes its own, as from its options (file, format). */
export const SERVER_OWN_LOGGER = "server's own";

export async function startTestServer(
  models: Readonly<Record<string, TestModel>> | string,
  options: Partial<ServerOptions> = {},
  logger: Logger | typeof SERVER_OWN_LOGGER = silentLogger(),
): Promise<TestServer> {
  const repository = typeof models === "string" ? undefined : tempRepository(models);
  const server = await startServer(
    {
      ...DEFAULT_SERVER_OPTIONS,
      modelRepositories: [typeof models === "string" ? models : repository!.path],
      host: "127.0.0.1",
      httpPort: 0,
      grpcPort: 0,
      metricsPort: 0,
      exitTimeoutSecs: 5,
      ...options,
    },
    logger === SERVER_OWN_LOGGER ? {} : { logger },
  );
  return {
    server,
    url: `http://127.0.0.1:${server.httpPort}`,
    grpcPort: server.grpcPort ?? 0,
    metricsUrl: `http://127.0.0.1:${server.metricsPort}/metrics`,
    repositoryPath: typeof models === "string" ? models : repository!.path,
    async stop() {
      await server.stop();
      repository?.remove();
    },
  };
}
