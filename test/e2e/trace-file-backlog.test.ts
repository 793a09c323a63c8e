import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { createReadStream, mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, test } from "node:test";
import type { InferRequest } from "../../src/core/infer.ts";
import type { RequestRecord } from "../../src/core/scheduler/request-observer.ts";
import { NONE_SPECIFIED, TraceSetting } from "../../src/observability/trace-setting.ts";
import { tritonTraceFile } from "../../src/observability/triton-trace-file.ts";

// Triton's trace file is streamed as requests are traced; what waits for the disk is
// bounded over all the files being written: while it is past the bound, traces are
// dropped and no new file is opened, and tracing goes on once the disk catches up. A
// named pipe stands for a disk that has stopped: nothing written to it leaves memory
// until a reader opens it.

const folder = mkdtempSync(join(tmpdir(), "seqserve-trace-backlog-"));
after(() => rmSync(folder, { recursive: true, force: true }));

function record(id: string): RequestRecord {
  const request: InferRequest = {
    id,
    inputs: new Map(),
    outputs: undefined,
    parameters: {},
    sequence: undefined,
  };
  return { request, arrivalNs: 1000, totalNs: 500, sequenceId: undefined };
}

function setting(logFrequency: number): TraceSetting {
  return new TraceSetting(
    { level: { timestamps: true, tensors: false }, rate: 1, count: -1, logFrequency },
    NONE_SPECIFIED,
  );
}

/** The request ids of a trace file's traces, in order. */
function tracedIds(text: string): string[] {
  const entries = JSON.parse(text) as { model_name?: string; request_id?: string }[];
  return entries.filter((entry) => entry.model_name !== undefined).map((entry) => entry.request_id as string);
}

test("past the bound, traces are dropped and no file is opened; tracing resumes once the disk catches up", async () => {
  const path = join(folder, "trace.json");
  execFileSync("mkfifo", [path]);
  const errors: string[] = [];
  const sink = tritonTraceFile(path, (_, error) => errors.push(error.message), 2048);
  const mainSetting = setting(0);
  const partSetting = setting(1);

  // About 300 bytes a trace: the bound is reached within a few, and the rest are dropped.
  for (let i = 0; i < 40; i++) sink.record(mainSetting, "m", "1", record(`before-${i}`));
  // Behind on the main file: a setting writing a file per trace opens none.
  sink.record(partSetting, "m", "1", record("part-while-behind"));

  // The disk catches up: a reader takes everything written so far.
  let text = "";
  const reader = createReadStream(path, { encoding: "utf8" });
  reader.on("data", (chunk) => {
    text += chunk;
  });
  const ended = new Promise<void>((resolve) => reader.on("end", () => resolve()));
  // A probe at a time until one is written: those recorded while still behind are dropped.
  for (let probe = 0; !text.includes('"probe-'); probe++) {
    sink.record(mainSetting, "m", "1", record(`probe-${probe}`));
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  sink.record(partSetting, "m", "1", record("part-after"));
  await sink.close();
  await ended;

  assert.deepEqual(errors, []);
  const ids = tracedIds(text);
  const before = ids.filter((id) => id.startsWith("before-"));
  assert.ok(before.length >= 1 && before.length < 40, `${before.length} of 40 traces written while behind`);
  assert.deepEqual(
    before,
    before.map((_, i) => `before-${i}`),
    "the traces up to the bound, in order; none after it",
  );
  const probes = ids.slice(before.length);
  assert.ok(probes.length >= 1, "then the probes recorded once the disk caught up");
  for (const id of probes) assert.match(id, /^probe-\d+$/);
  // The part written after catching up is the first one opened: none was opened while behind.
  assert.deepEqual(readdirSync(folder).sort(), ["trace.json", "trace.json.0"]);
  assert.deepEqual(tracedIds(readFileSync(`${path}.0`, "utf8")), ["part-after"]);
});

test("a request picked under a setting since retired writes its trace to a part closed at once", async () => {
  const path = join(folder, "retired.json");
  const sink = tritonTraceFile(path, () => {}, 1 << 20);
  const old = setting(5);
  sink.record(old, "m", "1", record("before"));
  // The settings change while a request picked under the old one runs.
  sink.retire(old);
  sink.record(old, "m", "1", record("late"));
  const current = setting(5);
  sink.record(current, "m", "1", record("after"));
  // Both of the old setting's parts are whole JSON before the server stops.
  await new Promise((resolve) => setTimeout(resolve, 100));
  const parts = readdirSync(folder)
    .filter((name) => name.startsWith("retired.json."))
    .sort();
  assert.equal(parts.length, 3, parts.join(", "));
  assert.deepEqual(tracedIds(readFileSync(join(folder, parts[0]!), "utf8")), ["before"]);
  assert.deepEqual(tracedIds(readFileSync(join(folder, parts[1]!), "utf8")), ["late"]);
  await sink.close();
  assert.deepEqual(tracedIds(readFileSync(join(folder, parts[2]!), "utf8")), ["after"]);
});
