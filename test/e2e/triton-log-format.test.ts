import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { type TempRepository, tempRepository } from "../support/model-repository.ts";
import { BIN, type Exit, ServerProcess } from "../support/seqserve-process.ts";
import { waitUntil } from "./support/serving.ts";

// --log-format default and ISO8601 write Triton's records, read with the regexes of
// Triton's own log checks (qa/L0_logging/log_format_test.py), and Triton's streams:
// warnings and errors on standard error, the rest on standard output (qa/L0_logging/
// test.sh), or everything in the --log-file. A model that fails to load gives an error.

const DEFAULT_LOG_RECORD =
  /^(?<level>\w)(?<month>\d{2})(?<day>\d{2}) (?<timestamp>\d{2}:\d{2}:\d{2}\.\d{6}) (?<pid>\d+) (?<file>[\w.]+):(?<line>\d+)] (?<message>.*)$/;
const ISO8601_LOG_RECORD =
  /^(?<ISO8601_timestamp>\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z) (?<level>\w+) (?<pid>\d+) (?<file>.+):(?<line>\d+)] (?<message>.*)$/;
const RECORD = { default: DEFAULT_LOG_RECORD, ISO8601: ISO8601_LOG_RECORD } as const;

const CORRUPT = { onnx: new TextEncoder().encode("this is not an ONNX model") };

interface LogRecord {
  readonly level: string;
  readonly pid: string;
  readonly message: string;
}

/** The records of `text`, each line of which must be one of `format`. */
function records(text: string, format: keyof typeof RECORD): LogRecord[] {
  return text
    .split("\n")
    .filter((line) => line !== "")
    .map((line) => {
      const match = RECORD[format].exec(line);
      assert.ok(match, `not a Triton ${format} record: ${line}`);
      const { level, pid, message } = match.groups!;
      return { level: level!, pid: pid!, message: message! };
    });
}

/** seqserve serving a repository whose one model fails to load, run until listening, then stopped. */
async function serve(repository: string, flags: readonly string[]): Promise<{ exit: Exit; pid: number }> {
  const server = new ServerProcess(process.execPath, [
    BIN,
    "--model-repository",
    repository,
    "--host",
    "127.0.0.1",
    "--http-port",
    "0",
    "--grpc-port",
    "0",
    "--metrics-port",
    "0",
    "--exit-on-error=false",
    ...flags,
  ]);
  // Not JSON: no listening line is read.
  server.listening.catch(() => {});
  const pid = server.child.pid!;
  const file = flags.find((flag) => flag.startsWith("--log-file="))?.slice("--log-file=".length);
  await waitUntil(
    "the listening record",
    async () =>
      server.notJson.some((line) => line.includes("listening: ")) ||
      (file !== undefined &&
        (() => {
          try {
            return readFileSync(file, "utf8").includes("listening: ");
          } catch {
            return false;
          }
        })()),
    60_000,
  );
  const exit = await server.stop();
  assert.equal(exit.code, 0, exit.stderr);
  return { exit, pid };
}

describe("Triton's log formats", { timeout: 180_000 }, () => {
  let repository: TempRepository;
  const folder = mkdtempSync(join(tmpdir(), "seqserve-log-format-"));
  before(() => {
    repository = tempRepository({ corrupt: CORRUPT });
  });
  after(() => {
    repository?.remove();
    rmSync(folder, { recursive: true, force: true });
  });

  for (const format of ["default", "ISO8601"] as const) {
    it(`--log-format=${format}: Triton's records, I on standard output, W and E on standard error`, async () => {
      const { exit, pid } = await serve(repository.path, [`--log-format=${format}`]);
      const out = records(exit.stdout, format);
      const err = records(exit.stderr, format);
      assert.ok(
        out.some(
          (r) => r.level === "I" && r.message.startsWith('"seqserve ') && r.message.includes("listening: "),
        ),
        exit.stdout,
      );
      assert.ok(
        out.every((r) => r.level === "I"),
        exit.stdout,
      );
      assert.ok(
        err.every((r) => r.level === "W" || r.level === "E"),
        exit.stderr,
      );
      const failed = err.find((r) => r.message.includes("event=model_load_failed"));
      assert.ok(failed, exit.stderr);
      assert.equal(failed.level, "E");
      // The message is a JSON string, as Triton escapes it; the record's fields follow it.
      assert.match(failed.message, /^"[^"\\]*(\\.[^"\\]*)*" event=model_load_failed model=corrupt /);
      assert.ok([...out, ...err].every((r) => r.pid === String(pid)));
    });
  }

  it("--log-file takes every record, I, W and E alike; none is written to standard output or error", async () => {
    const file = join(folder, "server.log");
    const { exit } = await serve(repository.path, ["--log-format=ISO8601", `--log-file=${file}`]);
    // (What the process writes outside its log, a native library's notice, may still come.)
    for (const text of [exit.stdout, exit.stderr]) {
      const stray = text.split("\n").filter((line) => RECORD.ISO8601.test(line));
      assert.deepEqual(stray, [], text);
    }
    const levels = new Set(records(readFileSync(file, "utf8"), "ISO8601").map((r) => r.level));
    assert.ok(levels.has("I") && levels.has("E"), [...levels].join());
  });
});
