import assert from "node:assert/strict";
import { after, test } from "node:test";
import { eventOf, handlerRepository, RECORDER } from "../handlers/support/handler-kit.ts";
import { BIN, FREE_PORT_FLAGS, ServerProcess } from "../support/seqserve-process.ts";

// --exit-timeout-secs bounds the exit whatever is under way, as Triton counts the models
// loading and unloading against it: a load whose initialize() takes 40 s held a stopping
// server for those 40 s. The test's timeout is below that.
//
// A drain with work still in flight says so each second, and an exit cut short fails.

const SLOW_START = `${RECORDER}
export default {
  async initialize(context: any) {
    eventsFile = context.model.parameters.events_file;
    record({ hook: "initialize" });
    await new Promise((resolve) => setTimeout(resolve, 40_000));
  },
  execute(requests: any[]) {
    return requests.map(() => ({ outputs: {} }));
  },
};
`;

const repository = handlerRepository((eventsFile) => ({
  slow_start: {
    config: `
backend: "typescript"
max_batch_size: 0
input [ { name: "X" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "Y" data_type: TYPE_INT32 dims: [ 1 ] } ]
parameters { key: "events_file" value: { string_value: "${eventsFile}" } }
`,
    files: { "1/model.ts": SLOW_START },
  },
}));
after(() => repository.remove());

/** A server of the repository, loading nothing until asked, with this exit timeout. */
const explicitServer = (exitTimeoutSecs: number): ServerProcess =>
  new ServerProcess(process.execPath, [
    BIN,
    ...FREE_PORT_FLAGS,
    "--model-repository",
    repository.path,
    "--model-control-mode",
    "explicit",
    "--exit-timeout-secs",
    String(exitTimeoutSecs),
  ]);

test("a server stopped while a model loads exits at its exit timeout, not when the load ends", {
  timeout: 30_000,
}, async () => {
  const server = explicitServer(2);
  const url = `http://127.0.0.1:${(await server.listening).http_port}`;
  const load = fetch(`${url}/v2/repository/models/slow_start/load`, { method: "POST", body: "{}" }).then(
    (response) => response.status,
    () => 0,
  );
  await eventOf(
    repository.eventsFile,
    "the load's initialize() to run",
    (event) => event.hook === "initialize",
  );
  const exit = await server.stop();
  // Cut short, the exit fails, as Triton's does ("Exit timeout expired. Exiting immediately.").
  assert.equal(exit.code, 1, exit.stderr);
  assert.ok(
    server.lines.some((line) => line.event === "exit_timeout"),
    "the log says the exit timeout cut the load short",
  );
  assert.ok(server.lines.some((line) => line.msg === "Exit timeout expired. Exiting immediately."));
  await load;
});

test("an idle server stops cleanly, even with an exit timeout of 0, as Triton's does", {
  timeout: 30_000,
}, async () => {
  const server = explicitServer(0);
  await server.listening;
  const exit = await server.stop();
  assert.equal(exit.code, 0, exit.stderr);
  assert.ok(server.lines.some((line) => line.event === "stopped"));
});
