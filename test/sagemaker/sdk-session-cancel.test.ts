import assert from "node:assert/strict";
import { rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import type { SageMakerRuntimeClient } from "@aws-sdk/client-sagemaker-runtime";
import {
  eventOf,
  type HandlerRepository,
  handlerRepository,
  RECORDER,
  readEvents,
} from "../handlers/support/handler-kit.ts";
import { listSequences } from "../support/sequence-kit.ts";
import { startTestServer, type TestServer } from "../support/test-server.ts";
import { invoke, jsonAnswer, openSession, sdkClient } from "./support/sagemaker-kit.ts";

// A SageMaker session lives until it is closed or expires: a client that gives up on a step
// (the SDK's read timeout, after which it retries; an abort) does not end it. The step is
// dropped if it had not run; one that runs completes, its model code not told (it may
// have called other stateful models: undone halfway, the session would no longer match
// them), and a retry numbered with `sequence_step` gets its answer without running it
// again. (Triton's rule, which ends the sequence of a cancelled request, is not SageMaker's.)

const MODEL = "gated_sum";

/**
 * A running sum kept in the session's state. A step records that it runs, and a step of
 * VALUE 2 then waits for the gate file (parameter `gate_file`) to exist: the test gives up
 * on it, or queues a step behind it, while it runs. It heeds its request's signal, as
 * model code should: it would stop if it were told.
 */
const GATED_SUM = `${RECORDER}
import { existsSync } from "node:fs";
let gateFile = "";
export default {
  initialize(context: any) {
    eventsFile = context.model.parameters.events_file;
    gateFile = context.model.parameters.gate_file;
  },
  async execute(requests: any[]) {
    const out = [];
    for (const r of requests) {
      const value = Number(r.inputs.VALUE.data[0]);
      record({ hook: "running", session: r.sequence.id, value });
      try {
        while (value === 2 && !existsSync(gateFile)) {
          // A request its client left stops (it fails, and changes nothing).
          r.signal.throwIfAborted();
          await new Promise((resolve) => setTimeout(resolve, 5));
        }
      } catch (error) {
        record({ hook: "stopped", session: r.sequence.id, value });
        out.push(error);
        continue;
      }
      const sum = (r.sequence.state.get("sum") ?? 0) + value;
      r.sequence.state.set("sum", sum);
      out.push({ outputs: { SUM: { datatype: "INT32", shape: [1, 1], data: Int32Array.of(sum) } } });
    }
    return out;
  },
};
`;

const config = (eventsFile: string, gateFile: string) => `
backend: "typescript"
max_batch_size: 4
input [ { name: "VALUE" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "SUM" data_type: TYPE_INT32 dims: [ 1 ] } ]
sequence_batching { oldest { max_candidate_sequences: 8 } }
instance_group [ { count: 1 kind: KIND_CPU } ]
parameters { key: "events_file" value { string_value: "${eventsFile}" } }
parameters { key: "gate_file" value { string_value: "${gateFile}" } }
`;

let repository: HandlerRepository;
let gateFile: string;
let server: TestServer;
let client: SageMakerRuntimeClient;
before(async () => {
  repository = handlerRepository((eventsFile) => {
    gateFile = join(eventsFile, "..", "gate");
    return { [MODEL]: { config: config(eventsFile, gateFile), files: { "1/model.ts": GATED_SUM } } };
  });
  server = await startTestServer(repository.path, { sagemakerPort: 0 });
  client = sdkClient(server.server.sagemakerPort!);
});
after(async () => {
  client?.destroy();
  await server?.stop();
  repository?.remove();
});

/** A step of session `id` adding `value`, numbered `step` if given; its running sum. */
async function step(id: string, value: number, step?: number, abortSignal?: AbortSignal): Promise<number> {
  const output = await invoke(
    client,
    {
      body: JSON.stringify([value]),
      sessionId: id,
      targetModel: MODEL,
      ...(step === undefined ? {} : { customAttributes: `sequence_step=${step}` }),
    },
    abortSignal,
  );
  return (jsonAnswer(output) as number[][])[0]![0]!;
}

/** `step(…)` with an abort signal, settled as the abort's error name or the sum. */
function abortable(id: string, value: number, number?: number) {
  const gaveUp = new AbortController();
  const settled = step(id, value, number, gaveUp.signal).catch((error: Error) => error.name);
  return { gaveUp, settled };
}

/** Waits until session `id` has `queued` steps waiting behind the one that runs. */
async function queuedBehind(id: string, queued: number): Promise<void> {
  for (;;) {
    const { sequences } = await listSequences(server.url, MODEL);
    if (sequences.some((s) => s.id === id && s.queued === queued)) return;
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
}

/** Opens a session whose step of VALUE 2 will wait for the gate (closed until `openGate`). */
async function gatedSession(): Promise<string> {
  rmSync(gateFile, { force: true });
  return (await openSession(client, MODEL)).id;
}
const openGate = (): void => writeFileSync(gateFile, "");

/** Step 2 (VALUE 2, numbered `number` if given) of session `id`, given up on while it runs; then the gate opens. */
async function gaveUpWhileRunning(id: string, number?: number): Promise<void> {
  const running = abortable(id, 2, number);
  await eventOf(
    repository.eventsFile,
    "the step running",
    (e) => e.hook === "running" && e.session === id && e.value === 2,
  );
  running.gaveUp.abort();
  assert.equal(await running.settled, "AbortError");
  // The server learns of it as the connection closes, at once on loopback; the step is
  // held at the gate meanwhile (given this long, code told of it would have stopped).
  await new Promise((resolve) => setTimeout(resolve, 200));
  openGate();
}

/** How many times session `id`'s step of `value` began to run. */
const runs = (id: string, value: number): number =>
  readEvents(repository.eventsFile).filter(
    (e) => e.hook === "running" && e.session === id && e.value === value,
  ).length;

describe("a SageMaker client that gives up on a step", { timeout: 60_000 }, () => {
  it("a step given up on while it ran completes: its numbered retry is answered from it, not run again", async () => {
    const id = await gatedSession();
    // Opened without inputs, the session's first step is step 1.
    assert.equal(await step(id, 1, 1), 1);
    await gaveUpWhileRunning(id, 2);
    assert.equal(await step(id, 2, 2), 3, "its retry gets its answer");
    assert.equal(await step(id, 3, 3), 6);
    assert.equal(runs(id, 2), 1, "the step ran once");
    assert.deepEqual(
      readEvents(repository.eventsFile).filter((e) => e.hook === "stopped" && e.session === id),
      [],
      "its code was not told to stop",
    );
  });

  it("keeps its session: a step given up on while it ran completes, and the session goes on from it", async () => {
    const id = await gatedSession();
    assert.equal(await step(id, 1), 1);
    await gaveUpWhileRunning(id);
    assert.equal(await step(id, 3), 6, "the step given up on was applied");
  });

  it("keeps its session: a step given up on before it ran is dropped", async () => {
    const id = await gatedSession();
    const running = step(id, 2);
    await eventOf(
      repository.eventsFile,
      "the step running",
      (e) => e.hook === "running" && e.session === id && e.value === 2,
    );
    const waiting = abortable(id, 100);
    await queuedBehind(id, 1);
    waiting.gaveUp.abort();
    assert.equal(await waiting.settled, "AbortError");
    // The server learns of it when the connection closes, after the SDK has given up.
    await queuedBehind(id, 0);
    openGate();
    assert.equal(await running, 2);
    assert.equal(await step(id, 3), 5, "the step given up on was not applied");
  });
});
