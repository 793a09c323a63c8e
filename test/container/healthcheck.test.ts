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
    repository = tempRepository({ m: { onnx: identityModel("FP32", [-1, 4]) } });
  });
  after(() => repository.remove());

  it("asks a server where its command line puts it: HTTP, SageMaker's /ping, gRPC's health service, over TLS too", async () => {
    const [http, grpc, metrics, sagemaker] = [
      await freePort(),
      await freePort(),
      await freePort(),
      await freePort(),
    ];
    const kserve = new ServerProcess(process.execPath, [
      BIN,
      "--model-repository",
      repository.path,
      "--host",
      "127.0.0.1",
      `--http-port=${http}`,
      "--grpc-port",
      String(grpc),
      "--metrics-port",
      String(metrics),
    ]);
    const onlySagemaker = new ServerProcess(process.execPath, [
      BIN,
      "--model-repository",
      repository.path,
      "--host",
      "127.0.0.1",
      "--allow-http=false",
      "--allow-grpc=false",
      "--allow-metrics=false",
      "--allow-sagemaker=true",
      "--sagemaker-port",
      String(sagemaker),
    ]);
    // OVMS's usual launch: gRPC alone, asked through gRPC's health service.
    const onlyGrpc = new ServerProcess(process.execPath, [
      BIN,
      "--model_path",
      join(repository.path, "m"),
      "--model_name",
      "m",
      "--port",
      String(await freePort()),
      "--host",
      "127.0.0.1",
    ]);
    // Over TLS: HTTPS, and gRPC alone; the server's own certificate is taken as it is.
    const tls = join(fileURLToPath(new URL("../fixtures/tls/", import.meta.url)));
    const certificate = (flag: "http" | "grpc") => [
      `--${flag}-use-ssl=true`,
      `--${flag}-server-cert`,
      join(tls, "server.pem"),
      `--${flag}-server-key`,
      join(tls, "server-key.pem"),
    ];
    const https = new ServerProcess(process.execPath, [
      BIN,
      "--model-repository",
      repository.path,
      "--host",
      "127.0.0.1",
      "--allow-grpc=false",
      "--allow-metrics=false",
      "--http-port",
      String(await freePort()),
      ...certificate("http"),
    ]);
    const grpcTls = new ServerProcess(process.execPath, [
      BIN,
      "--model-repository",
      repository.path,
      "--host",
      "127.0.0.1",
      "--allow-http=false",
      "--allow-metrics=false",
      "--grpc-port",
      String(await freePort()),
      ...certificate("grpc"),
    ]);
    // SageMaker's own launch: its port from the server's environment, not the check's.
    const serve = new ServerProcess(
      process.execPath,
      [BIN, "serve", "--model-repository", repository.path, "--host", "127.0.0.1"],
      { SAGEMAKER_BIND_TO_PORT: String(await freePort()) },
    );
    const servers = [kserve, onlySagemaker, onlyGrpc, https, grpcTls, serve];
    try {
      await Promise.all(servers.map((server) => server.listening));
      for (const server of servers)
        assert.equal(healthcheck(server.child.pid!), 0, server.child.spawnargs.join(" "));
    } finally {
      await Promise.all(servers.map((server) => server.stop()));
    }
  });
});
