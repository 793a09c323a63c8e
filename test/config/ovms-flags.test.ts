import assert from "node:assert/strict";
import { describe, it } from "node:test";
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
