import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import { identityModel } from "../../tools/onnx/test-models.ts";
import { type TempRepository, tempRepository } from "../support/model-repository.ts";
import { BIN, freePort, ServerProcess } from "../support/seqserve-process.ts";

// The image's HEALTHCHECK reads where the server listens from the server's own command
// line, as the server reads it: a launch on other ports, or a SageMaker container, is
// checked where it serves (it asked 8000 and 8080 whatever the flags said).

const HEALTHCHECK = join(fileURLToPath(new URL("../..", import.meta.url)), "docker", "healthcheck.mjs");

/** The healthcheck's exit code, pointed at the server process `pid`. */
function healthcheck(pid: number): number | null {
  const run = spawnSync(process.execPath, [HEALTHCHECK], {
    env: { ...process.env, SEQSERVE_HEALTH_PID: String(pid), SEQSERVE_HEALTH_URL: "" },
    timeout: 20_000,
  });
  return run.status;
}

describe("the image's healthcheck", { timeout: 60_000 }, () => {
  let repository: TempRepository;
  before(() => {
    repository = tempRepository({
      m: { onnx: identityModel("FP32", [-1, 4]) },
      broken: { onnx: new TextEncoder().encode("not an ONNX model") },
    });
  });
  after(() => repository.remove());

  /** A server on 127.0.0.1 launched with `args`. */
  const server = (args: readonly string[], env: Record<string, string> = {}) =>
    new ServerProcess(process.execPath, [BIN, ...args, "--host", "127.0.0.1"], env);
  /** The repository with `loaded` loaded (the others stay unloaded). */
  const models = (...loaded: string[]) => [
    "--model-repository",
    repository.path,
    "--model-control-mode",
    "explicit",
    ...loaded.flatMap((name) => ["--load-model", name]),
  ];
  const port = async () => String(await freePort());
  const endpoints = async () => [
    "--http-port",
    await port(),
    "--grpc-port",
    await port(),
    "--metrics-port",
    await port(),
  ];
  // Over TLS, the server's own certificate is taken as it is.
  const tls = fileURLToPath(new URL("../fixtures/tls/", import.meta.url));
  const certificate = (flag: "http" | "grpc") => [
    `--${flag}-use-ssl=true`,
    `--${flag}-server-cert`,
    join(tls, "server.pem"),
    `--${flag}-server-key`,
    join(tls, "server-key.pem"),
  ];

  it("asks a server where its command line puts it: HTTP, SageMaker's /ping, gRPC's health service, over TLS too", async () => {
    const only = ["--allow-http=false", "--allow-grpc=false", "--allow-metrics=false"];
    /** A server with only `flag`'s endpoint (http or grpc), over TLS. */
    const overTls = async (flag: "http" | "grpc") =>
      server([
        ...models("m"),
        ...only,
        `--allow-${flag}=true`,
        `--${flag}-port`,
        await port(),
        ...certificate(flag),
      ]);
    const servers = [
      server([...models("m"), ...(await endpoints())]),
      server([...models("m"), ...only, "--allow-sagemaker=true", "--sagemaker-port", await port()]),
      // OVMS's usual launch: gRPC alone, asked through gRPC's health service.
      server(["--model_path", join(repository.path, "m"), "--model_name", "m", "--port", await port()]),
      await overTls("http"),
      await overTls("grpc"),
      // SageMaker's own launch: its port from the server's environment, not the check's.
      server(["serve", ...models("m")], { SAGEMAKER_BIND_TO_PORT: await port() }),
    ];
    try {
      await Promise.all(servers.map((s) => s.listening));
      for (const s of servers) assert.equal(healthcheck(s.child.pid!), 0, s.child.spawnargs.join(" "));
    } finally {
      await Promise.all(servers.map((s) => s.stop()));
    }
  });

  it("says unhealthy where the server it finds is not ready (a model that failed to load)", async () => {
    const notReady = server([...models("m", "broken"), "--exit-on-error=false", ...(await endpoints())]);
    try {
      await notReady.listening;
      assert.equal(healthcheck(notReady.child.pid!), 1);
    } finally {
      await notReady.stop();
    }
  });
});
