import assert from "node:assert/strict";
import { writeFileSync } from "node:fs";
import { after, before, test } from "node:test";
import { infer, outputData, postJson, type SequenceParams } from "../support/http-client.ts";
import { touchModel } from "../support/model-repository.ts";
import { metricValue } from "../support/sequence-kit.ts";
import { startTestServer, type TestServer } from "../support/test-server.ts";
import { eventOf, type HandlerRepository, handlerRepository, RECORDER } from "./support/handler-kit.ts";

// A reload moves live sequences to the new version once the old one runs no batch; until
// then the old version's sequences wait. That wait is bounded by --exit-timeout-secs (here
// 1 s): past it the reload fails, saying why, and the loaded version goes on serving its
// sequences with their state. A later reload, once the model is idle, moves them.

const SLOW_ON_999 = `${RECORDER}
import { existsSync } from "node:fs";
export default {
  initialize(context: any) {
    eventsFile = context.model.parameters.events_file;
  },
  async execute(requests: any[]) {
    return Promise.all(
      requests.map(async (request) => {
        const value = Number(request.inputs.VALUE.data[0]);
        if (value === 999) {
          record({ hook: "execute", value });
          // Held until the test lets it go, however long the reload takes to get here.
          while (!existsSync(eventsFile + ".release")) await new Promise((resolve) => setTimeout(resolve, 20));
        }
        const sum = (request.sequence.state.get("sum") ?? 0) + value;
        request.sequence.state.set("sum", sum);
        return { outputs: { SUM: { datatype: "INT32", shape: [1, 1], data: Int32Array.of(sum) } } };
      }),
    );
  },
};
`;

const CONFIG = `
backend: "typescript"
max_batch_size: 4
input [ { name: "VALUE" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "SUM" data_type: TYPE_INT32 dims: [ 1 ] } ]
sequence_batching {
  max_sequence_idle_microseconds: 60000000
  direct { }
}
instance_group [ { count: 1 kind: KIND_CPU } ]
parameters { key: "events_file" value: { string_value: "EVENTS_FILE" } }
`;

// The same model without sequences.
const HELD_CONFIG = CONFIG.replace(/sequence_batching \{[^}]*\}[^}]*\}\n/, "");

// The same, without sequences: a reload does not wait for its requests.
const HELD_ON_888 = SLOW_ON_999.replace(
  `        const sum = (request.sequence.state.get("sum") ?? 0) + value;
        request.sequence.state.set("sum", sum);`,
  "        const sum = value;",
)
  .replace('eventsFile + ".release"', 'eventsFile + ".release-held"')
  .replace("value === 999", "value === 888");

let repository: HandlerRepository;
let server: TestServer;
before(async () => {
  repository = handlerRepository((eventsFile) => ({
    slow: { config: CONFIG.replace("EVENTS_FILE", eventsFile), files: { "1/model.ts": SLOW_ON_999 } },
    held: { config: HELD_CONFIG.replace("EVENTS_FILE", eventsFile), files: { "1/model.ts": HELD_ON_888 } },
  }));
  server = await startTestServer(repository.path, {
    modelControlMode: "explicit",
    loadModels: ["slow", "held"],
    exitTimeoutSecs: 1,
  });
});
after(async () => {
  await server?.stop();
  repository?.remove();
});

const add = async (value: number, sequence: SequenceParams): Promise<number> =>
  outputData(
    await infer(
      server.url,
      "slow",
      [{ name: "VALUE", datatype: "INT32", shape: [1, 1], data: [value] }],
      sequence,
    ),
    "SUM",
  )[0] as number;

test("a reload that finds a request still running past the exit timeout fails, and the loaded version serves on", async () => {
  assert.equal(await add(1, { id: 7, start: true }), 1);
  const slow = add(999, { id: 7 });
  await eventOf(repository.eventsFile, "the slow request to run", (event) => event.value === 999);
  touchModel(repository.path, "slow");
  const reload = await postJson(`${server.url}/v2/repository/models/slow/load`, {});
  assert.notEqual(reload.status, 200, JSON.stringify(reload.body));
  assert.match(
    reload.body.error as string,
    /^model 'slow' was not reloaded: requests of its sequences were still running after 1 s/,
  );
  writeFileSync(`${repository.eventsFile}.release`, "");
  assert.equal(await slow, 1000);
  assert.equal(await add(1, { id: 7 }), 1001);
  // Idle now: the reload goes through, and the sequence moves with its state.
  const again = await postJson(`${server.url}/v2/repository/models/slow/load`, {});
  assert.equal(again.status, 200, JSON.stringify(again.body));
  assert.equal(await add(1, { id: 7, end: true }), 1002);
});

test("a request the replaced load answers after a reload counts in the version's counters", async () => {
  const held = (value: number) =>
    infer(server.url, "held", [{ name: "VALUE", datatype: "INT32", shape: [1, 1], data: [value] }]);
  const successes = () =>
    metricValue(server.metricsUrl, "nv_inference_request_success", { model: "held", version: "1" });
  assert.equal((await held(1)).status, 200);
  const running = held(888);
  await eventOf(repository.eventsFile, "the held request to run", (event) => event.value === 888);
  // A model without sequences is reloaded while its request runs.
  touchModel(repository.path, "held");
  const reload = await postJson(`${server.url}/v2/repository/models/held/load`, {});
  assert.equal(reload.status, 200, JSON.stringify(reload.body));
  writeFileSync(`${repository.eventsFile}.release-held`, "");
  assert.equal((await running).status, 200);
  // Answered by the replaced load after the switch: counted all the same.
  assert.equal(await successes(), 2);
});
