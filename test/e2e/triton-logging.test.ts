import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it, test } from "node:test";
import pino from "pino";
import { createLogger, type LogFormat } from "../../src/observability/logger.ts";
import { identityModel } from "../../tools/onnx/test-models.ts";
import { TestClient } from "../grpc/support/grpc-harness.ts";
import { touchModel } from "../support/model-repository.ts";
import { SERVER_OWN_LOGGER, startTestServer, type TestServer } from "../support/test-server.ts";

// Triton's logging extension (`/v2/logging`, gRPC LogSettings), as tritonclient's
// get_log_settings / update_log_settings use it: the settings in Triton's names, and a
// change applied to the running server's logger, which then logs (or not) accordingly.
// The format switches the timestamps to ISO 8601 and back while serving, as Triton's
// does; the file is chosen at start, as Triton's is.

describe("Triton's logging extension", () => {
  let server: TestServer;
  let grpc: TestClient;
  const lines: Record<string, unknown>[] = [];
  const logger = pino({ level: "info" }, { write: (line: string) => lines.push(JSON.parse(line)) });
  before(async () => {
    server = await startTestServer({}, {}, logger);
    grpc = new TestClient(server.grpcPort);
  });
  after(async () => {
    grpc.close();
    await server.stop();
  });

  const post = async (body: unknown) => {
    const response = await fetch(`${server.url}/v2/logging`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify(body),
    });
    return { status: response.status, body: (await response.json()) as Record<string, unknown> };
  };

  it("HTTP: reads the settings, changes the level, and the server logs accordingly", async () => {
    const initial = await (await fetch(`${server.url}/v2/logging`)).json();
    assert.deepEqual(initial, {
      log_file: "",
      log_info: true,
      log_warning: true,
      log_error: true,
      log_verbose_level: 0,
      log_format: "default",
    });
    const quieter = await post({ log_info: false, log_warning: false });
    assert.equal(quieter.status, 200);
    assert.deepEqual(
      [quieter.body.log_info, quieter.body.log_warning, quieter.body.log_error],
      [false, false, true],
    );
    // The server's logger now leaves warnings out.
    const before = lines.length;
    logger.warn("a warning nobody asked for");
    assert.equal(lines.length, before);
    const verbose = await post({ log_verbose_level: 1, log_info: true });
    assert.deepEqual([verbose.body.log_info, verbose.body.log_verbose_level], [true, 1]);
    logger.debug("now seen");
    assert.equal(lines.at(-1)?.msg, "now seen");
    // Read back as set, as Triton does (every level past 1 logs alike).
    assert.equal((await post({ log_verbose_level: 5 })).body.log_verbose_level, 5);
    const read = (await (await fetch(`${server.url}/v2/logging`)).json()) as { log_verbose_level: number };
    assert.equal(read.log_verbose_level, 5);
    await post({ log_verbose_level: 0, log_info: true, log_warning: true });
  });

  it("HTTP: the file and the format cannot change while serving; a bad value is named", async () => {
    // Any file is refused, the current one ("") included, as Triton refuses it.
    for (const log_file of ["/tmp/elsewhere.log", ""]) {
      const file = await post({ log_file });
      assert.equal(file.status, 501);
      assert.deepEqual(file.body, { error: "log file location can not be updated through network protocol" });
    }
    const format = await post({ log_format: "ISO8601" });
    assert.equal(format.status, 501);
    const bad = await post({ log_info: "yes" });
    assert.equal(bad.status, 400);
    assert.deepEqual(bad.body, { error: "Unable to parse 'log_info': expected a bool" });
    // Nothing changed.
    assert.equal((await post({})).body.log_info, true);
  });

  it("gRPC LogSettings: the same settings as SettingValues, and a change", async () => {
    type Settings = {
      settings: Record<string, { bool_param?: boolean; uint32_param?: number; string_param?: string }>;
    };
    const read = await grpc.unary<Settings>("LogSettings", {});
    assert.equal(read.settings.log_info?.bool_param, true);
    assert.equal(read.settings.log_verbose_level?.uint32_param, 0);
    assert.equal(read.settings.log_format?.string_param, "default");
    const changed = await grpc.unary<Settings>("LogSettings", {
      settings: { log_verbose_level: { uint32_param: 2 } },
    });
    assert.equal(changed.settings.log_verbose_level?.uint32_param, 2);
    assert.equal(logger.level, "trace");
    await grpc.unary<Settings>("LogSettings", { settings: { log_verbose_level: { uint32_param: 0 } } });
    assert.equal(logger.level, "info");
  });
});

test("a server launched with --log-verbose 3 reads it back as 3, as Triton does", async () => {
  const logger = pino({ level: "trace" }, { write: () => {} });
  const server = await startTestServer({}, { logLevel: "trace", logVerbose: 3 }, logger);
  try {
    const read = (await (await fetch(`${server.url}/v2/logging`)).json()) as { log_verbose_level: number };
    assert.equal(read.log_verbose_level, 3);
  } finally {
    await server.stop();
  }
});

describe("Triton's log_format changed while serving", () => {
  const folder = mkdtempSync(join(tmpdir(), "seqserve-logs-"));
  after(() => rmSync(folder, { recursive: true, force: true }));

  /** A server logging to its own file in `format`, in explicit mode so that loads log a line. */
  async function logging(format: LogFormat) {
    const file = join(folder, `${format}.log`);
    const server = await startTestServer(
      { m: { onnx: identityModel("FP32", [-1, 4]) } },
      {
        grpcPort: undefined,
        metricsPort: undefined,
        modelControlMode: "explicit",
        logFormat: format,
        logFile: file,
      },
      SERVER_OWN_LOGGER,
    );
    const url = server.url;
    const setFormat = async (logFormat: string) => {
      const response = await fetch(`${url}/v2/logging`, {
        method: "POST",
        body: JSON.stringify({ log_format: logFormat }),
      });
      assert.equal(response.status, 200);
      return ((await response.json()) as { log_format: string }).log_format;
    };
    /** The log line a model load writes (its file touched: a load of a model as it was changes nothing). */
    const loadLine = async (): Promise<string> => {
      touchModel(server.repositoryPath, "m", "1/model.onnx");
      assert.equal((await fetch(`${url}/v2/repository/models/m/load`, { method: "POST" })).status, 200);
      const lines = readFileSync(file, "utf8").trim().split("\n");
      return lines.filter((line) => line.includes("loaded model 'm'")).at(-1)!;
    };
    return { server, setFormat, loadLine };
  }

  it("JSON lines: the time becomes an ISO 8601 string, and a number again", async () => {
    const { server, setFormat, loadLine } = await logging("json");
    try {
      assert.equal(typeof JSON.parse(await loadLine()).time, "number");
      assert.equal(await setFormat("ISO8601"), "ISO8601");
      assert.match(JSON.parse(await loadLine()).time, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
      assert.equal(await setFormat("default"), "default");
      assert.equal(typeof JSON.parse(await loadLine()).time, "number");
    } finally {
      await server.stop();
    }
  });

  it("Triton's records: the default format becomes ISO8601, and default again", async () => {
    const { server, setFormat, loadLine } = await logging("text");
    const iso = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ I \d+ seqserve:0\] /;
    const triton = /^I\d{4} \d\d:\d\d:\d\d\.\d{6} \d+ seqserve:0\] /;
    try {
      const line = await loadLine();
      assert.match(line, triton);
      // One line per record, its message a JSON string, its fields after it (collectors read lines).
      assert.match(line, /\] "loaded model 'm'.*" .*\bmodel=m\b/);
      assert.equal(await setFormat("ISO8601"), "ISO8601");
      assert.match(await loadLine(), iso);
      assert.equal(await setFormat("default"), "default");
      assert.match(await loadLine(), triton);
    } finally {
      await server.stop();
    }
  });

  for (const format of ["json", "text"] as const) {
    it(`${format}: a log file that cannot be written drops its lines; the server serves on`, async () => {
      // /dev/full refuses every write (ENOSPC), as a full disk does.
      const said: string[] = [];
      const stderrWrite = process.stderr.write;
      process.stderr.write = ((chunk: string) => said.push(String(chunk)) > 0) as typeof process.stderr.write;
      let server: TestServer | undefined;
      try {
        server = await startTestServer(
          { m: { onnx: identityModel("FP32", [-1, 4]) } },
          { grpcPort: undefined, metricsPort: undefined, logFormat: format, logFile: "/dev/full" },
          SERVER_OWN_LOGGER,
        );
        for (let i = 0; i < 3; i++) {
          const answer = await fetch(`${server.url}/v2/models/m/infer`, {
            method: "POST",
            body: JSON.stringify({
              inputs: [{ name: "INPUT0", datatype: "FP32", shape: [1, 4], data: [1, 2, 3, 4] }],
            }),
          });
          assert.equal(answer.status, 200);
        }
      } finally {
        await server?.stop();
        process.stderr.write = stderrWrite;
      }
      // The start's lines (a model loaded, the ports) were dropped, which is said once.
      const notices = said.filter((line) => line.includes("cannot write the log file '/dev/full'"));
      assert.equal(notices.length, 1, said.join(""));
      assert.match(notices[0]!, /\(ENOSPC: no space left on device, write\); its lines are dropped/);
    });
  }
});

test("a Triton record is one line whatever it holds: an error's stack and a message's line breaks are escaped", async () => {
  const folder = mkdtempSync(join(tmpdir(), "seqserve-log-lines-"));
  try {
    const file = join(folder, "text.log");
    const logger = await createLogger({ level: "info", format: "ISO8601", file });
    logger.error({ err: new Error("boom\nsecond line"), model: "m" }, "a failure\nnext \u001b[31mred");
    logger.info({ model: "m", note: "two words" }, "plain");
    const lines = readFileSync(file, "utf8").trim().split("\n");
    assert.equal(lines.length, 2, lines.join("\n"));
    assert.match(
      lines[0]!,
      /^\S+ E \d+ seqserve:0\] "a failure\\nnext \\u001b\[31mred" err=\{"type":"Error","message":"boom\\nsecond line","stack":"Error: boom\\nsecond line\\n/,
    );
    assert.match(lines[0]!, / model=m$/);
    assert.match(lines[1]!, /^\S+ I \d+ seqserve:0\] "plain" model=m note="two words"$/);
  } finally {
    rmSync(folder, { recursive: true, force: true });
  }
});
