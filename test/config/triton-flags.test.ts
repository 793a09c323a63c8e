import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { describe, it } from "node:test";
import { parseCommandLine, UsageError } from "../../src/cli/options.ts";
import type { ServerOptions } from "../../src/config/server-options.ts";

// Triton's command line as seqserve reads it: every flag of `tritonserver --help` (Triton's
// src/command_line_parser.cc) is accepted with Triton's spelling and values, honoured or
// accepted with a one-line notice, except those refused because serving without them
// would mislead; the README's table lists each of them.

/** Every flag of `tritonserver --help`, with a value as a launch script would give it (undefined: none). */
const TRITON_HELP: readonly (readonly [string, string | undefined])[] = [
  ["id", "triton"],
  ["exit-timeout-secs", "30"],
  ["model-store", "."],
  ["model-repository", "."],
  ["exit-on-error", "true"],
  ["disable-auto-complete-config", undefined],
  ["strict-readiness", "true"],
  ["model-control-mode", "none"],
  ["repository-poll-secs", "15"],
  ["model-config-name", "h100"],
  ["model-load-thread-count", "4"],
  ["model-load-retry-count", "0"],
  ["model-namespacing", "false"],
  ["enable-peer-access", "true"],
  ["allow-http", "true"],
  ["http-address", "0.0.0.0"],
  ["http-port", "8000"],
  ["reuse-http-port", "false"],
  ["http-header-forward-pattern", "x-.*"],
  ["http-thread-count", "8"],
  ["http-max-input-size", "67108864"],
  ["allow-grpc", "true"],
  ["grpc-address", "0.0.0.0"],
  ["grpc-port", "8001"],
  ["reuse-grpc-port", "false"],
  ["grpc-header-forward-pattern", "x-.*"],
  ["grpc-infer-thread-count", "2"],
  ["grpc-infer-allocation-pool-size", "8"],
  ["grpc-max-response-pool-size", "64"],
  ["grpc-use-ssl", "false"],
  ["grpc-use-ssl-mutual", "false"],
  ["grpc-infer-response-compression-level", "none"],
  ["grpc-keepalive-time", "7200000"],
  ["grpc-keepalive-timeout", "20000"],
  ["grpc-keepalive-permit-without-calls", "false"],
  ["grpc-http2-max-pings-without-data", "2"],
  ["grpc-http2-min-recv-ping-interval-without-data", "300000"],
  ["grpc-http2-max-ping-strikes", "2"],
  ["grpc-max-connection-age", "600000"],
  ["grpc-max-connection-age-grace", "30000"],
  ["log-verbose", "0"],
  ["log-info", "true"],
  ["log-warning", "true"],
  ["log-error", "true"],
  ["log-format", "default"],
  ["log-file", "server.log"],
  ["allow-sagemaker", "false"],
  ["sagemaker-port", "8080"],
  ["sagemaker-safe-port-range", "8000-8002"],
  ["sagemaker-thread-count", "8"],
  ["allow-vertex-ai", "false"],
  ["vertex-ai-port", "8080"],
  ["vertex-ai-thread-count", "8"],
  ["vertex-ai-default-model", "m"],
  ["allow-metrics", "true"],
  ["allow-gpu-metrics", "true"],
  ["allow-cpu-metrics", "true"],
  ["metrics-address", "0.0.0.0"],
  ["metrics-port", "8002"],
  ["metrics-interval-ms", "2000"],
  ["metrics-config", "summary_latencies=true"],
  ["trace-config", "level=TIMESTAMPS"],
  ["cache-config", "local,size=1048576"],
  ["cache-directory", "/opt/tritonserver/caches"],
  ["rate-limit", "off"],
  ["rate-limit-resource", "R1:10:0"],
  ["pinned-memory-pool-byte-size", "268435456"],
  ["cuda-memory-pool-byte-size", "0:67108864"],
  ["cuda-virtual-address-size", "0:1073741824"],
  ["min-supported-compute-capability", "6.0"],
  ["buffer-manager-thread-count", "0"],
  ["host-policy", "gpu_0,numa-node=0"],
  ["model-load-gpu-limit", "0:0.8"],
  ["allow-client-shm", "false"],
  ["backend-directory", "/opt/tritonserver/backends"],
  ["backend-config", "onnxruntime,default-max-batch-size=8"],
  ["repoagent-directory", "/opt/tritonserver/repoagents"],
  ["strict-model-config", "false"],
  ["response-cache-byte-size", "0"],
  ["trace-file", "trace.json"],
  ["trace-level", "TIMESTAMPS"],
  ["trace-rate", "1000"],
  ["trace-count", "-1"],
  ["trace-log-frequency", "0"],
];

/** Refused, whatever their value, with the reason. */
const REFUSED: readonly (readonly [string, string, RegExp])[] = [
  ["allow-vertex-ai", "true", /no Vertex AI endpoint/],
];

const parse = (argv: readonly string[], env: Record<string, string> = {}): ServerOptions => {
  const command = parseCommandLine(argv, env);
  assert.equal(command.kind, "serve");
  return (command as { options: ServerOptions }).options;
};
const withRepository = (...argv: string[]): ServerOptions => parse(["--model-repository", ".", ...argv]);

describe("Triton's flags", () => {
  it("every flag of tritonserver --help is accepted with Triton's spelling and a typical value", () => {
    for (const [name, value] of TRITON_HELP) {
      const argv = value === undefined ? [`--${name}`] : [`--${name}`, value];
      assert.doesNotThrow(() => withRepository(...argv), `--${name}`);
      assert.doesNotThrow(
        () => withRepository(...(value === undefined ? argv : [`--${name}=${value}`])),
        name,
      );
    }
  });

  it("all at once, as one launch script, with a one-line notice for each that has no effect", () => {
    const argv = TRITON_HELP.filter(([name]) => !["model-config-name", "log-file"].includes(name)).flatMap(
      ([name, value]) => (value === undefined ? [`--${name}`] : [`--${name}`, value]),
    );
    const options = parse([...argv, "--log-format", "ISO8601"]);
    assert.equal(options.logFormat, "ISO8601");
    for (const notice of options.notices) assert.doesNotMatch(notice, /\n/);
    for (const flag of [
      "allow-gpu-metrics",
      "pinned-memory-pool-byte-size",
      "http-thread-count",
      "cache-config",
    ]) {
      assert.ok(
        options.notices.some((n) => n.startsWith(`--${flag}`) && n.includes("has no effect")),
        flag,
      );
    }
    assert.ok(options.notices.some((n) => n.startsWith("--trace-file is deprecated in Triton")));
    const twice = withRepository(
      "--cuda-memory-pool-byte-size=0:1024",
      "--cuda-memory-pool-byte-size=1:1024",
    );
    assert.equal(twice.notices.filter((n) => n.startsWith("--cuda-memory-pool-byte-size")).length, 1);
  });

  it("refuses, saying why, the flags whose absence here would mislead", () => {
    for (const [name, value, why] of REFUSED) {
      assert.throws(
        () => withRepository(`--${name}`, value),
        (error: unknown) =>
          error instanceof UsageError &&
          error.message.startsWith(`--${name} is not supported`) &&
          why.test(error.message),
        name,
      );
    }
  });

  it("are all in the README's table, each honoured, accepted without effect, or refused", () => {
    const readme = readFileSync(new URL("../../README.md", import.meta.url), "utf8");
    const start = readme.indexOf("### Triton's command line");
    assert.ok(start >= 0, "the README has the section");
    const section = readme.slice(start, readme.indexOf("\n### ", start + 1));
    for (const [name] of [...TRITON_HELP, ...REFUSED]) {
      assert.match(section, new RegExp(`^\\| [^|]*\`--${name}\`[^|]*\\|`, "m"), `--${name} has a row`);
    }
  });

  it("booleans in Triton's spellings: true/false, on/off, 1/0, any case", () => {
    assert.equal(withRepository("--strict-readiness", "OFF").strictReadiness, false);
    assert.equal(withRepository("--strict-readiness=0").strictReadiness, false);
    assert.equal(withRepository("--exit-on-error", "False").exitOnError, false);
    assert.equal(withRepository("--allow-http", "on").httpPort, 8000);
    assert.equal(withRepository().allowClientSharedMemory, false);
    assert.equal(withRepository("--allow-client-shm=true").allowClientSharedMemory, true);
    assert.throws(
      () => withRepository("--exit-on-error=maybe"),
      /--exit-on-error expects true or false, got 'maybe'/,
    );
  });

  it("logging: --log-verbose, --log-info/-warning/-error as a level, --log-level over them, --log-file, formats", () => {
    assert.equal(withRepository().logLevel, "info");
    assert.equal(withRepository("--log-verbose", "1").logLevel, "debug");
    assert.equal(withRepository("--log-verbose=3").logLevel, "trace");
    // Kept, for the logging extension to read back as given.
    assert.equal(withRepository("--log-verbose=3").logVerbose, 3);
    assert.equal(withRepository("--log-info", "false").logLevel, "warn");
    assert.equal(withRepository("--log-info=false", "--log-warning=false").logLevel, "error");
    assert.equal(withRepository("--log-info=0", "--log-warning=0", "--log-error=0").logLevel, "silent");
    assert.equal(withRepository("--log-info=false", "--log-level", "debug").logLevel, "debug");
    // OVMS's spelling is honoured too, and wins over Triton's flags as --log-level does.
    assert.equal(withRepository("--log_level", "DEBUG").logLevel, "debug");
    assert.equal(withRepository("--log_level", "ERROR", "--log-verbose", "1").logLevel, "error");
    assert.equal(withRepository("--log-file", "logs/server.log").logFile, "logs/server.log");
    assert.equal(withRepository("--log-format", "default").logFormat, "text");
    assert.equal(withRepository().logFormat, "json");
    const terminal = parseCommandLine(["--model-repository", "."], {}, { terminal: true });
    assert.equal((terminal as { options: ServerOptions }).options.logFormat, "text");
  });

  it("server, readiness and model loading", () => {
    const options = withRepository(
      "--id=edge-7",
      "--exit-on-error=false",
      "--strict-readiness=false",
      "--disable-auto-complete-config",
      "--model-config-name=h100",
      "--model-load-retry-count=2",
    );
    assert.deepEqual(
      [
        options.serverId,
        options.exitOnError,
        options.strictReadiness,
        options.strictModelConfig,
        options.modelConfigName,
        options.modelLoadRetryCount,
      ],
      ["edge-7", false, false, true, "h100", 2],
    );
    const defaults = withRepository();
    assert.deepEqual(
      [defaults.exitOnError, defaults.strictReadiness, defaults.serverId],
      [true, true, "seqserve"],
    );
    // Triton's deprecated spelling: honoured, with Triton's warning; the new one is not warned about.
    const deprecated =
      "Warning: '--strict-model-config' has been deprecated! Please use '--disable-auto-complete-config' instead.";
    const strict = withRepository("--strict-model-config=true");
    // A warning (standard error with Triton's log formats), not a notice of a flag without effect.
    assert.deepEqual(
      [strict.strictModelConfig, strict.warnings, strict.notices.includes(deprecated)],
      [true, [deprecated], false],
    );
    assert.deepEqual(options.warnings, []);
    assert.throws(
      () => withRepository("--model-config-name", "../x"),
      /--model-config-name must be a file name/,
    );
    // "*" loads every model, and only on its own, as Triton has it.
    const explicit = ["--model-control-mode=explicit"];
    assert.deepEqual(withRepository(...explicit, "--load-model=*").loadModels, ["*"]);
    for (const names of [
      ["--load-model=*", "--load-model=a"],
      ["--load-model=a", "--load-model=*"],
    ]) {
      assert.throws(
        () => withRepository(...explicit, ...names),
        (error: unknown) =>
          error instanceof UsageError &&
          error.message === "Wildcard model name '*' must be the ONLY startup model if specified at all.",
        names.join(" "),
      );
    }
  });

  it("values Triton takes as it reads them: the control mode in any case, poll seconds of 0, clamped counts", () => {
    assert.equal(withRepository("--model-control-mode=EXPLICIT").modelControlMode, "explicit");
    assert.equal(withRepository("--model-control-mode=Poll").modelControlMode, "poll");
    // In poll mode, 0 loads the repository once and never rescans it; elsewhere it is unused.
    assert.equal(
      withRepository("--model-control-mode=poll", "--repository-poll-secs=0").repositoryPollSecs,
      0,
    );
    assert.equal(withRepository("--repository-poll-secs=0").repositoryPollSecs, 0);
    // Triton raises these to their least value rather than refuse them.
    const clamped = withRepository("--exit-timeout-secs=-1", "--model-load-thread-count=0");
    assert.deepEqual([clamped.exitTimeoutSecs, clamped.modelLoadThreadCount], [0, 1]);
    assert.throws(
      () => withRepository("--exit-timeout-secs=soon"),
      /--exit-timeout-secs expects a whole number/,
    );
  });

  it("addresses per endpoint: the metrics address follows the HTTP address, as Triton's", () => {
    const options = withRepository("--http-address", "127.0.0.2", "--grpc-address", "127.0.0.3");
    assert.deepEqual(
      [options.httpAddress, options.grpcAddress, options.metricsAddress],
      ["127.0.0.2", "127.0.0.3", "127.0.0.2"],
    );
    assert.equal(withRepository("--http-address=a", "--metrics-address=b").metricsAddress, "b");
    assert.equal(withRepository("--http-max-input-size", "1024").httpBodyLimitBytes, 1024);
  });

  it("metrics and trace settings in Triton's syntax", () => {
    const options = withRepository(
      "--metrics-config",
      "summary_latencies=true",
      "--metrics-config",
      "summary_quantiles=0.5:0.05,0.99:0.001",
      "--metrics-config=counter_latencies=false",
      "--allow-cpu-metrics=false",
      "--metrics-interval-ms",
      "500",
      "--trace-config",
      "mode=opentelemetry",
      "--trace-config",
      "opentelemetry,url=collector:4318/v1/traces",
      "--trace-config",
      "opentelemetry,resource=service.name=edge",
      "--trace-config",
      "rate=10",
      "--trace-config",
      "count=100",
      "--trace-config",
      "level=TIMESTAMPS",
      "--trace-config",
      "opentelemetry,bsp_schedule_delay=100",
    );
    assert.deepEqual(
      [
        options.metrics.summaryLatencies,
        options.metrics.counterLatencies,
        options.metrics.histogramLatencies,
      ],
      [true, false, true],
    );
    assert.deepEqual(
      options.metrics.summaryQuantiles.map((q) => q.quantile),
      [0.5, 0.99],
    );
    assert.deepEqual([options.metrics.cpuMetrics, options.metrics.intervalMs], [false, 500]);
    const t = options.tracing;
    assert.deepEqual(
      [t.mode, t.url, t.rate, t.count, t.timestamps, t.bspScheduleDelayMs, t.resource["service.name"]],
      ["opentelemetry", "http://collector:4318/v1/traces", 10, 100, true, 100, "edge"],
    );
    // The deprecated flags, and --trace-config over them.
    const old = withRepository(
      "--trace-rate",
      "5",
      "--trace-level",
      "TIMESTAMPS",
      "--trace-config",
      "rate=7",
    );
    assert.deepEqual([old.tracing.rate, old.tracing.timestamps], [7, true]);
    assert.equal(
      withRepository("--trace-level=TENSORS", "--trace-config", "level=OFF").tracing.tensors,
      false,
    );
    const fromEnv = parse(["--model-repository", "."], {
      OTEL_BSP_MAX_QUEUE_SIZE: "4096",
      OTEL_RESOURCE_ATTRIBUTES: "deployment.environment=test",
    });
    assert.equal(fromEnv.tracing.bspMaxQueueSize, 4096);
    assert.equal(fromEnv.tracing.resource["deployment.environment"], "test");
    assert.throws(
      () => withRepository("--trace-config", "level=LOUD"),
      /--trace-config level must be OFF, TIMESTAMPS or TENSORS/,
    );
    assert.throws(
      () => withRepository("--metrics-config", "summary_quantiles=2:0.1"),
      /summary_quantiles expects/,
    );
  });

  it("gRPC TLS needs its certificate and key; the SageMaker safe port range is checked", () => {
    assert.throws(
      () => withRepository("--grpc-use-ssl", "true"),
      /--grpc-use-ssl needs --grpc-server-cert and --grpc-server-key/,
    );
    // Triton's other spellings of true, as for every boolean flag.
    assert.throws(
      () => withRepository("--grpc-use-ssl", "ON"),
      /--grpc-use-ssl needs --grpc-server-cert and --grpc-server-key/,
    );
    assert.throws(
      () =>
        withRepository("--grpc-use-ssl=true", "--grpc-server-cert", "no/cert.pem", "--grpc-server-key", "k"),
      /--grpc-server-cert: cannot read 'no\/cert.pem'/,
    );
    assert.throws(
      () => withRepository("--allow-sagemaker=true", "--sagemaker-safe-port-range", "9000-9100"),
      /The server cannot listen to HTTP requests at port 8000, allowed port range is \[9000, 9100\]/,
    );
    assert.doesNotThrow(() =>
      withRepository("--allow-sagemaker=true", "--sagemaker-safe-port-range=8000-8002"),
    );
  });

  it("`serve` reads the environment Triton's SageMaker image reads: its endpoints, log levels and additional flags", () => {
    const command = parseCommandLine(["serve", "--model-repository", "."], {
      SAGEMAKER_TRITON_ALLOW_GRPC: "true",
      SAGEMAKER_TRITON_GRPC_PORT: "8301",
      SAGEMAKER_TRITON_ALLOW_METRICS: "true",
      SAGEMAKER_TRITON_METRICS_PORT: "8302",
      SAGEMAKER_TRITON_LOG_VERBOSE: "1",
      SAGEMAKER_TRITON_ADDITIONAL_ARGS: "--exit-timeout-secs=5  --allow-grpc=false",
    });
    assert.equal(command.kind, "serve");
    const options = (command as { options: ServerOptions }).options;
    // The additional flags come last and win, as in Triton's image: gRPC off after all.
    assert.deepEqual(
      [options.grpcPort, options.metricsPort, options.logVerbose, options.logLevel, options.exitTimeoutSecs],
      [undefined, 8302, 1, "debug", 5],
    );
    // A flag given to `serve` wins over the variable.
    const given = parseCommandLine(["serve", "--model-repository", ".", "--metrics-port", "8402"], {
      SAGEMAKER_TRITON_ALLOW_METRICS: "true",
      SAGEMAKER_TRITON_METRICS_PORT: "8302",
    });
    assert.equal((given as { options: ServerOptions }).options.metricsPort, 8402);
  });

  it("`serve` loads SAGEMAKER_TRITON_DEFAULT_MODEL_NAME's model, and the --load-model models of its additional flags beside it", () => {
    const env = { SAGEMAKER_TRITON_DEFAULT_MODEL_NAME: "session_context" };
    const alone = parseCommandLine(["serve", "--model-repository", "examples/models"], env);
    assert.deepEqual(
      [
        (alone as { options: ServerOptions }).options.modelControlMode,
        (alone as { options: ServerOptions }).options.loadModels,
      ],
      ["explicit", ["session_context"]],
    );
    // A model that calls another (session_context calls text_embedder) gets it loaded so, as in Triton.
    const withCalled = parseCommandLine(["serve", "--model-repository", "examples/models"], {
      ...env,
      SAGEMAKER_TRITON_ADDITIONAL_ARGS: "--load-model=text_embedder --load-model=session_context",
    });
    assert.deepEqual((withCalled as { options: ServerOptions }).options.loadModels, [
      "session_context",
      "text_embedder",
    ]);
  });

  it("two endpoints on one address and port are refused as Triton refuses them, before any model loads", () => {
    assert.throws(
      () => withRepository("--http-port", "9100", "--grpc-port", "9100"),
      /The server cannot listen to HTTP requests and GRPC requests at the same address and port 0\.0\.0\.0:9100$/,
    );
    assert.throws(
      () => withRepository("--allow-sagemaker=true", "--sagemaker-port", "8002"),
      /cannot listen to metrics requests and SageMaker requests at the same address and port 0\.0\.0\.0:8002/,
    );
    // Apart by address, or on free ports, they are not.
    assert.doesNotThrow(() =>
      withRepository("--http-port", "9100", "--grpc-port", "9100", "--grpc-address", "127.0.0.1"),
    );
    assert.doesNotThrow(() => withRepository("--http-port", "0", "--grpc-port", "0", "--metrics-port", "0"));
  });

  it("a SageMaker session TTL is at most 100 years, so that its expiry is a date the header can give", () => {
    assert.equal(
      withRepository("--sagemaker-session-ttl-secs", "3155760000").sagemakerSessionTtlSecs,
      3155760000,
    );
    assert.throws(
      () => withRepository("--sagemaker-session-ttl-secs", "9007199254740991"),
      /--sagemaker-session-ttl-secs must be between 1 and 3155760000/,
    );
    assert.throws(
      () => parseCommandLine(["serve"], { SAGEMAKER_SESSIONS_EXPIRATION: "9007199254740991" }),
      /SAGEMAKER_SESSIONS_EXPIRATION must be a whole number up to 3155760000/,
    );
  });
});
