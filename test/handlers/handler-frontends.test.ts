import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { type RunningServer, startServer } from "../../src/app/server.ts";
import { DEFAULT_SERVER_OPTIONS } from "../../src/config/server-options.ts";
import { silentLogger } from "../../src/observability/logger.ts";
import { postJson } from "../support/http-client.ts";
import { eventOf, RECORDER } from "./support/handler-kit.ts";

// A handler served as an OpenVINO Model Server user serves a model: an entry of an OVMS
// config.json whose folder holds model.js (no backend named anywhere: the file says it is
// code, as OVMS tells formats from files), inputs and outputs from the handler's metadata,
// `stateful: true`. Its sequences go through the TF-Serving REST API with OVMS's special
// inputs, and the handler sees them as it sees KServe's: one state per sequence, told
// when the sequence ends. Plain JavaScript: no TypeScript loader is involved.

const SUM_JS = `${RECORDER.replace("(event: Record<string, unknown>)", "(event)")}
export const metadata = {
  inputs: [{ name: "VALUE", datatype: "INT32", shape: [-1, 1] }],
  outputs: [{ name: "SUM", datatype: "INT32", shape: [-1, 1] }],
};
export function initialize(context) {
  eventsFile = context.model.parameters.events_file ?? "";
}
export function execute(requests) {
  return requests.map((r) => {
    const sum = (r.sequence.state.get("sum") ?? 0) + r.inputs.VALUE.data[0];
    r.sequence.state.set("sum", sum);
    return { outputs: { SUM: { datatype: "INT32", shape: [1, 1], data: Int32Array.of(sum) } } };
  });
}
export function sequenceEnded(sequence, reason) {
  record({ hook: "sequenceEnded", id: sequence.id, reason, sum: sequence.state.get("sum") });
}
`;

let dir: string;
let server: RunningServer;
let url: string;
let eventsFile: string;

before(async () => {
  dir = mkdtempSync(join(tmpdir(), "seqserve-handler-ovms-"));
  eventsFile = join(dir, "events.jsonl");
  mkdirSync(join(dir, "running_sum", "1"), { recursive: true });
  writeFileSync(
    join(dir, "running_sum", "1", "model.js"),
    SUM_JS.replace('?? ""', `?? ${JSON.stringify(eventsFile)}`),
  );
  writeFileSync(
    join(dir, "config.json"),
    JSON.stringify({
      model_config_list: [{ config: { name: "running_sum", base_path: "running_sum", stateful: true } }],
    }),
  );
  server = await startServer(
    {
      ...DEFAULT_SERVER_OPTIONS,
      ovmsConfigs: [join(dir, "config.json")],
      host: "127.0.0.1",
      httpPort: 0,
      grpcPort: undefined,
      metricsPort: undefined,
      exitTimeoutSecs: 1,
      configPollSecs: 0,
    },
    { logger: silentLogger() },
  );
  url = `http://127.0.0.1:${server.httpPort}`;
});

after(async () => {
  await server.stop();
  rmSync(dir, { recursive: true, force: true });
});

function predict(value: number, id: number, control: number) {
  return postJson(`${url}/v1/models/running_sum:predict`, {
    inputs: { VALUE: [[value]], sequence_id: [id], sequence_control_input: [control] },
  });
}

test("an OVMS entry holding model.js is served as model code over TF-Serving REST, statefully", async () => {
  const config = await (await fetch(`${url}/v2/models/running_sum/config`)).json();
  assert.equal((config as { backend: string }).backend, "typescript");
  const first = await predict(5, 31, 1);
  assert.equal(first.status, 200, JSON.stringify(first.body));
  assert.deepEqual(first.body.outputs, { SUM: [[5]], sequence_id: [31] });
  assert.deepEqual((await predict(3, 31, 0)).body.outputs, { SUM: [[8]], sequence_id: [31] });
  assert.deepEqual((await predict(10, 31, 2)).body.outputs, { SUM: [[18]], sequence_id: [31] });
  const ended = await eventOf(eventsFile, "sequenceEnded 31", (e) => e.hook === "sequenceEnded");
  assert.deepEqual(
    { id: ended.id, reason: ended.reason, sum: ended.sum },
    { id: "31", reason: "end", sum: 18 },
  );
  // OVMS's own refusal for an id that has ended.
  const gone = await predict(1, 31, 0);
  assert.equal(gone.status, 404);
  assert.deepEqual(gone.body, { error: "Sequence with provided ID does not exist" });
});
