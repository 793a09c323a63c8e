import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, it } from "node:test";
import { parseCommandLine } from "../../src/cli/options.ts";
import type { ServerOptions } from "../../src/config/server-options.ts";

// OVMS's spellings of settings seqserve has under Triton's names: an OVMS launch line that
// binds its endpoints or moves its log gets the same effect, with no "no effect" notice.

const parse = (...argv: string[]): ServerOptions => {
  const command = parseCommandLine(["--model-repository", ".", ...argv], {});
  assert.equal(command.kind, "serve");
  return (command as { options: ServerOptions }).options;
};

describe("OVMS's flags for addresses and the log file", () => {
  it("--rest_bind_address and --grpc_bind_address bind the endpoints; metrics follow the REST address", () => {
    const options = parse("--rest_bind_address", "127.0.0.2", "--grpc_bind_address", "127.0.0.3");
    assert.deepEqual(
      [options.httpAddress, options.grpcAddress, options.metricsAddress],
      ["127.0.0.2", "127.0.0.3", "127.0.0.2"],
    );
    assert.deepEqual(
      options.notices.filter((n) => /bind_address/.test(n)),
      [],
      "no notice calls them without effect",
    );
  });

  it("--metrics_enable serves the metrics on the REST port, with no port of their own unless asked", () => {
    const options = parse("--rest_port", "8500", "--metrics_enable");
    assert.deepEqual(
      [options.httpPort, options.metricsPort, options.metricsOnHttpPort],
      [8500, undefined, true],
    );
    const both = parse("--rest_port", "8500", "--metrics_enable", "--metrics-port", "9100");
    assert.deepEqual([both.metricsPort, both.metricsOnHttpPort], [9100, true]);
    assert.equal(parse("--rest_port", "8500").metricsOnHttpPort, false);
  });

  it("--log_path sends the log to a file", () => {
    const options = parse("--log_path", "logs/ovms.log");
    assert.equal(options.logFile, "logs/ovms.log");
    assert.deepEqual(
      options.notices.filter((n) => /log_path/.test(n)),
      [],
    );
  });

  it("a list of bind addresses is refused as the command line is read, saying how to serve both families", () => {
    assert.throws(
      () => parse("--rest_bind_address", "127.0.0.1,::1"),
      (error: Error) =>
        error.message ===
        "--rest_bind_address '127.0.0.1,::1' lists several addresses: seqserve binds an endpoint to one ('::' serves IPv4 and IPv6 both)",
    );
  });

  it("Triton's --http-address, --grpc-address and --log-file win over them", () => {
    const options = parse(
      "--rest_bind_address",
      "127.0.0.2",
      "--http-address",
      "127.0.0.4",
      "--grpc_bind_address",
      "127.0.0.3",
      "--grpc-address",
      "127.0.0.5",
      "--log_path",
      "a.log",
      "--log-file",
      "b.log",
    );
    assert.deepEqual(
      [options.httpAddress, options.grpcAddress, options.metricsAddress, options.logFile],
      ["127.0.0.4", "127.0.0.5", "127.0.0.4", "b.log"],
    );
  });
});

describe("OVMS's metrics settings: --metrics_enable, --metrics_list, the config's monitoring section", () => {
  const parseAll = (argv: readonly string[]): ServerOptions => {
    const command = parseCommandLine(argv, {});
    assert.equal(command.kind, "serve");
    return (command as { options: ServerOptions }).options;
  };
  const refused = (argv: readonly string[], message: string): void => {
    assert.throws(
      () => parseCommandLine(argv, {}),
      (error: Error) => error.message === message,
    );
  };
  const dirs: string[] = [];
  after(() => {
    for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
  });
  const config = (monitoring?: unknown): string => {
    const dir = mkdtempSync(join(tmpdir(), "seqserve-ovms-metrics-"));
    dirs.push(dir);
    const path = join(dir, "config.json");
    writeFileSync(
      path,
      JSON.stringify({ model_config_list: [], ...(monitoring === undefined ? {} : { monitoring }) }),
    );
    return path;
  };

  it("--metrics_enable serves OVMS's default families; --metrics_list names others", () => {
    const defaults = parse("--rest_port", "8500", "--metrics_enable");
    assert.ok(defaults.ovmsMetrics?.families.has("ovms_requests_success"));
    assert.ok(!defaults.ovmsMetrics?.families.has("ovms_infer_req_queue_size"));
    // An empty list is OVMS's default list.
    assert.deepEqual(
      parse("--rest_port", "8500", "--metrics_enable", "--metrics_list", "").ovmsMetrics?.families,
      defaults.ovmsMetrics?.families,
    );
    const listed = parse(
      "--rest_port",
      "8500",
      "--metrics_enable",
      "--metrics_list",
      "ovms_requests_success, ovms_infer_req_queue_size",
    );
    assert.deepEqual(
      [...(listed.ovmsMetrics?.families ?? [])],
      ["ovms_requests_success", "ovms_infer_req_queue_size"],
    );
    assert.equal(parse("--rest_port", "8500").ovmsMetrics, undefined);
  });

  it("refuses what OVMS refuses, with its messages", () => {
    const base = ["--model-repository", "."];
    refused(
      [...base, "--rest_port", "8500", "--metrics_list", "ovms_requests_success"],
      "metrics_enable setting is missing, required when metrics_list is provided",
    );
    refused(
      [...base, "--rest_port", "8500", "--metrics_enable", "--metrics_list", "ovms_requests_succes"],
      "Invalid name in metrics_list: 'ovms_requests_succes'",
    );
    refused(
      [...base, "--port", "9000", "--metrics_enable"],
      "rest_port setting is missing, metrics are enabled on rest port",
    );
    refused(
      ["--config_path", config({ metrics: { enable: true } }), "--rest_port", "8500", "--metrics_enable"],
      "Metrics configuration duplicated in configuration file and CLI parameters",
    );
    refused(
      [
        ...base,
        "--rest_port",
        "8500",
        "--metrics_enable",
        "--metrics_list",
        "ovms_requests_success,,ovms_streams",
      ],
      "Invalid name in metrics_list: ''",
    );
    refused(
      ["--config_path", config({ metrics: { enable: true } }), "--port", "9000"],
      "Missing rest_port parameter in server CLI",
    );
    // The section as OVMS's config schema reads it: `metrics` with `enable`, and a list.
    const invalid = "the config file's 'monitoring' section is invalid: ";
    for (const [monitoring, why] of [
      [
        { metrics: { enable: true, endpoint_path: "/a" } },
        "unknown key 'endpoint_path' in 'metrics' (OVMS serves its metrics at /metrics)",
      ],
      [
        { metrics: { enabled: true } },
        "unknown key 'enabled' in 'metrics' (OVMS serves its metrics at /metrics)",
      ],
      [{ metrics: {} }, "'metrics.enable' must be a boolean"],
      [{}, "'metrics' must be an object with 'enable'"],
      [{ metrics: { enable: false, metrics_list: ["nope"] } }, "Invalid name in metrics_list: 'nope'"],
    ] as const) {
      refused(
        ["--config_path", config(monitoring), "--rest_port", "8500"],
        why.startsWith("Invalid name") ? why : `${invalid}${why}`,
      );
    }
  });

  it("the config's monitoring section enables them, with its list", () => {
    const options = parseAll([
      "--config_path",
      config({
        metrics: {
          enable: true,
          metrics_list: ["ovms_requests_fail", "ovms_infer_req_active"],
        },
      }),
      "--rest_port",
      "8500",
    ]);
    assert.equal(options.metricsOnHttpPort, true);
    assert.deepEqual(
      [...(options.ovmsMetrics?.families ?? [])],
      ["ovms_requests_fail", "ovms_infer_req_active"],
    );
    const off = parseAll(["--config_path", config({ metrics: { enable: false } }), "--rest_port", "8500"]);
    assert.deepEqual([off.ovmsMetrics, off.metricsOnHttpPort], [undefined, false]);
  });

  it("--allowed_origins lists the web origins allowed, as --cors-allow-origin; OVMS's other CORS and key flags are accepted with a notice", () => {
    const file = config();
    const options = parseAll([
      "--config_path",
      file,
      "--rest_port",
      "8500",
      "--allowed_origins",
      "https://a.example, https://b.example:8443",
      "--allowed_methods",
      "GET,POST",
      "--allowed_headers",
      "*",
      "--allow_credentials",
      "--api_key_file",
      "key.txt",
    ]);
    assert.deepEqual(options.security?.corsAllowOrigins, ["https://a.example", "https://b.example:8443"]);
    assert.deepEqual(
      options.notices.map((n) => n.split(" has no effect")[0]),
      ["--allowed_methods", "--allowed_headers", "--api_key_file", "--allow_credentials"],
    );
    const any = parseAll(["--config_path", file, "--rest_port", "8500", "--allowed_origins", "*"]);
    assert.deepEqual(any.security?.corsAllowOrigins, ["*"]);
    refused(
      ["--config_path", file, "--rest_port", "8500", "--allowed_origins", "not an origin"],
      "--cors-allow-origin expects an origin such as https://app.example, got 'not an origin'",
    );
  });

  it("a config.json launch starts whatever models fail, and is ready, as OVMS; beside a Triton repository, Triton's rule holds", () => {
    const file = config();
    assert.equal(parseAll(["--config_path", file, "--rest_port", "8500"]).exitOnError, false);
    // OVMS is ready once it serves (Server::isReady), whichever models failed.
    assert.equal(parseAll(["--config_path", file, "--rest_port", "8500"]).strictReadiness, false);
    assert.equal(
      parseAll(["--config_path", file, "--rest_port", "8500", "--strict-readiness", "true"]).strictReadiness,
      true,
    );
    assert.equal(parseAll(["--config_path", file, "--model-repository", "."]).strictReadiness, true);
    assert.equal(
      parseAll(["--config_path", file, "--rest_port", "8500", "--exit-on-error", "true"]).exitOnError,
      true,
    );
    assert.equal(parseAll(["--config_path", file, "--model-repository", "."]).exitOnError, true);
  });
});
