import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { pino } from "pino";
import type { ModelStreamInferResponseMessage } from "../../src/frontends/grpc/messages.ts";
import { TestClient } from "../grpc/support/grpc-harness.ts";
import { postJson } from "../support/http-client.ts";
import { startTestServer, type TestServer } from "../support/test-server.ts";
import {
  eventOf,
  eventually,
  type HandlerEvent,
  type HandlerRepository,
  handlerRepository,
  RECORDER,
  readEvents,
} from "./support/handler-kit.ts";

// A step answered in its code's place (it timed out, its client left) may still be running
// in the handler's code: the client is answered at once, but the sequence's next step and
// its sequenceEnded() wait until that code is through with it, so the handler never runs
// two steps of one sequence at once, nor ends a sequence under a running step. Other
// sequences do not wait. A step whose execute() never returns holds its sequence only
// handler_timeout_ms more: then its worker is ended, as a stuck one. A decoupled request
// its code never completes is let go after as long, with a warning.

// Each step sleeps MS milliseconds, not heeding its signal (MS -1: never returns; MS -2:
// returns when its signal aborts, without completing its request), and records when it
// starts and ends, and whether another step of its sequence was running then.
const STEPS = `${RECORDER}
let detached = false;
let decoupled = false;
const active = new Set<string>();
export default {
  initialize(context: any) {
    eventsFile = context.model.parameters.events_file;
    detached = context.model.parameters.style === "detached";
    decoupled = context.model.parameters.decoupled === "true";
  },
  async execute(requests: any[]) {
    if (detached) {
      for (const r of requests) void step(r);
      return;
    }
    const responses = await Promise.all(requests.map(step));
    return decoupled ? undefined : responses;
  },
  sequenceEnded(sequence: any, reason: string) {
    const id = String(sequence.id);
    record({ hook: "ended", id, reason, overlapping: active.has(id), at: Date.now() });
  },
};
async function step(r: any) {
  const id = String(r.sequence.id);
  const ms = Number(r.inputs.MS.data[0]);
  record({ hook: "start", rid: r.id, id, overlapping: active.has(id), at: Date.now() });
  active.add(id);
  if (ms === -2) {
    await new Promise((resolve) => r.signal.addEventListener("abort", resolve));
    active.delete(id);
    return;
  }
  await new Promise((resolve) => { if (ms >= 0) setTimeout(resolve, ms); });
  active.delete(id);
  record({ hook: "end", rid: r.id, id, at: Date.now() });
  const response = { outputs: { MS: { datatype: "INT32", shape: [1], data: Int32Array.of(ms) } } };
  if (!decoupled) return response;
  // Refused once the request was answered in the step's place: the code is done with it all the same.
  await r.send(response, { final: true }).catch(() => {});
}
`;

const TIMEOUT_MS = 1000;
const SLEEP_MS = 1500;

function config(eventsFile: string, options: { decoupled: boolean; style: "await" | "detached" }): string {
  return `
backend: "typescript"
max_batch_size: 0
input [ { name: "MS" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "MS" data_type: TYPE_INT32 dims: [ 1 ] } ]
${options.decoupled ? "model_transaction_policy { decoupled: true }" : ""}
sequence_batching { max_sequence_idle_microseconds: 60000000 oldest { max_candidate_sequences: 8 } }
instance_group [ { count: 1 kind: KIND_CPU } ]
parameters { key: "handler_timeout_ms" value { string_value: "${TIMEOUT_MS}" } }
parameters { key: "events_file" value { string_value: "${eventsFile}" } }
parameters { key: "style" value { string_value: "${options.style}" } }
parameters { key: "decoupled" value { string_value: "${options.decoupled}" } }
`;
}

let repository: HandlerRepository;
let server: TestServer;
const logLines: string[] = [];

before(async () => {
  repository = handlerRepository((eventsFile) => ({
    steps_stream: {
      config: config(eventsFile, { decoupled: true, style: "await" }),
      files: { "1/model.ts": STEPS },
    },
    steps_detached: {
      config: config(eventsFile, { decoupled: true, style: "detached" }),
      files: { "1/model.ts": STEPS },
    },
    steps_unary: {
      config: config(eventsFile, { decoupled: false, style: "await" }),
      files: { "1/model.ts": STEPS },
    },
  }));
  const logger = pino({ level: "info" }, { write: (line: string) => logLines.push(line) });
  server = await startTestServer(repository.path, {}, logger);
});

after(async () => {
  await server.stop();
  repository.remove();
});

/** One step of sequence `id` over gRPC ModelStreamInfer. */
function step(
  model: string,
  rid: string,
  id: number,
  ms: number,
  flags: { start?: boolean; end?: boolean } = {},
) {
  return {
    model_name: model,
    id: rid,
    parameters: {
      sequence_id: { int64_param: String(id) },
      sequence_start: { bool_param: flags.start ?? false },
      sequence_end: { bool_param: flags.end ?? false },
    },
    inputs: [{ name: "MS", datatype: "INT32", shape: [1] }],
    raw_input_contents: [Buffer.from(Int32Array.of(ms).buffer)],
  };
}

interface Received {
  readonly message: ModelStreamInferResponseMessage;
  readonly at: number;
}

/** A ModelStreamInfer stream whose answers are kept with the time each came. */
function openStream(): {
  write(request: object): void;
  answered(rid: string): Promise<Received>;
  cancel(): void;
  close(): void;
} {
  const client = new TestClient(server.grpcPort);
  const stream = client.stream();
  const received: Received[] = [];
  stream.on("data", (message: ModelStreamInferResponseMessage) => received.push({ message, at: Date.now() }));
  stream.on("error", () => {});
  const ridOf = (r: Received): string | undefined =>
    r.message.infer_response?.id ?? /request '([^']+)'/.exec(r.message.error_message ?? "")?.[1];
  return {
    write: (request) => stream.write(request),
    answered: (rid) => eventually(`the answer to ${rid}`, () => received.find((r) => ridOf(r) === rid)),
    cancel: () => stream.cancel(),
    close: () => {
      stream.end();
      client.close();
    },
  };
}

const eventsOf = (id: number): HandlerEvent[] =>
  readEvents(repository.eventsFile).filter((e) => e.id === String(id));

/** The sequence's events in order, as "hook rid" (ends as "ended reason"). */
const story = (id: number): string[] =>
  eventsOf(id).map((e) => (e.hook === "ended" ? `ended ${e.reason}` : `${e.hook} ${e.rid}`));

function assertNoOverlap(id: number): void {
  assert.deepEqual(
    eventsOf(id).filter((e) => e.overlapping === true),
    [],
    `no step or end of sequence ${id} ran while another of its steps was running`,
  );
}

const at = (id: number, hook: string, rid?: string): number =>
  eventsOf(id).find((e) => e.hook === hook && (rid === undefined || e.rid === rid))!.at as number;

for (const model of ["steps_stream", "steps_detached"]) {
  test(`${model}: a step that timed out is answered at once; its sequence's next step and end wait for its code, other sequences do not`, async () => {
    const id = model === "steps_stream" ? 5 : 25;
    const other = id + 10;
    const stream = openStream();
    const others = openStream();
    try {
      stream.write(step(model, "r0", id, SLEEP_MS, { start: true }));
      stream.write(step(model, "r1", id, 0));
      stream.write(step(model, "r2", id, 0, { end: true }));
      const r0 = await stream.answered("r0");
      assert.match(
        r0.message.error_message ?? "",
        new RegExp(`did not answer request 'r0' within ${TIMEOUT_MS} ms \\(its handler_timeout_ms\\)`),
      );
      // Another sequence of the instance runs while r0's code still sleeps.
      others.write(step(model, "o0", other, 0, { start: true, end: true }));
      const o0 = await others.answered("o0");
      assert.equal(o0.message.error_message ?? "", "");
      await stream.answered("r2");
      await eventOf(repository.eventsFile, "the end", (e) => e.hook === "ended" && e.id === String(id));
      assert.deepEqual(story(id), [
        "start r0",
        "end r0",
        "start r1",
        "end r1",
        "start r2",
        "end r2",
        "ended end",
      ]);
      assertNoOverlap(id);
      // The client had its answer before the step's code was through, and so had the other sequence.
      const r0End = at(id, "end", "r0");
      assert.ok(r0.at < r0End, "r0 answered at its timeout, not when its code returned");
      assert.ok(at(other, "start", "o0") < r0End, "the other sequence did not wait for r0");
    } finally {
      stream.close();
      others.close();
    }
  });
}

test("a step whose client leaves: sequenceEnded('cancelled') comes once its code is through", async () => {
  const id = 6;
  const started = await postJson(`${server.url}/v2/models/steps_unary/infer`, {
    id: "s0",
    parameters: { sequence_id: id, sequence_start: true },
    inputs: [{ name: "MS", datatype: "INT32", shape: [1], data: [0] }],
  });
  assert.equal(started.status, 200);
  const leaving = new AbortController();
  const left = fetch(`${server.url}/v2/models/steps_unary/infer`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({
      id: "c0",
      parameters: { sequence_id: id },
      inputs: [{ name: "MS", datatype: "INT32", shape: [1], data: [1200] }],
    }),
    signal: leaving.signal,
  }).catch((error: Error) => error);
  await eventOf(repository.eventsFile, "c0 running", (e) => e.hook === "start" && e.rid === "c0");
  // At once: its code (1200 ms) runs past handler_timeout_ms from the cancel, but not past
  // twice handler_timeout_ms from its start, the time a step may take: it is waited for.
  leaving.abort();
  assert.ok((await left) instanceof Error);
  await eventOf(repository.eventsFile, "the end", (e) => e.hook === "ended" && e.id === String(id));
  assert.deepEqual(story(id), ["start s0", "end s0", "start c0", "end c0", "ended cancelled"]);
  assertNoOverlap(id);
  assert.ok(!logLines.some((l) => l.includes("never returned")), "no worker was ended");
});

test("an END still queued when its sequence is cancelled did not end it: sequenceEnded and the counts say 'cancelled'", async () => {
  const id = 40;
  const infer = (
    rid: string,
    ms: number,
    flags: { start?: boolean; end?: boolean } = {},
    signal?: AbortSignal,
  ) =>
    fetch(`${server.url}/v2/models/steps_unary/infer`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({
        id: rid,
        parameters: {
          sequence_id: id,
          sequence_start: flags.start ?? false,
          sequence_end: flags.end ?? false,
        },
        inputs: [{ name: "MS", datatype: "INT32", shape: [1], data: [ms] }],
      }),
      ...(signal === undefined ? {} : { signal }),
    });
  const endedCounts = async (): Promise<Record<string, number>> =>
    (
      (await (await fetch(`${server.url}/v2/models/steps_unary/sequences`)).json()) as {
        summary: { ended: Record<string, number> };
      }
    ).summary.ended;
  assert.equal((await infer("q0", 0, { start: true })).status, 200);
  const before = await endedCounts();
  const running = infer("q1", 600);
  await eventOf(repository.eventsFile, "q1 running", (e) => e.hook === "start" && e.rid === "q1");
  const leaving = new AbortController();
  const left = infer("q2", 0, {}, leaving.signal).catch((error: Error) => error);
  const end = infer("q3", 0, { end: true });
  // Both queued behind q1; the END's admission has released the id.
  await eventually("the END admitted", async () => {
    const listing = (await (await fetch(`${server.url}/v2/models/steps_unary/sequences`)).json()) as {
      sequences: { id: unknown; status: string }[];
    };
    return listing.sequences.some((s) => String(s.id) === String(id) && s.status === "ending")
      ? true
      : undefined;
  });
  leaving.abort();
  assert.ok((await left) instanceof Error);
  const endAnswer = await end;
  assert.equal(endAnswer.status, 400);
  assert.match(((await endAnswer.json()) as { error: string }).error, /one of its requests was cancelled/);
  assert.equal((await running).status, 200);
  await eventOf(repository.eventsFile, "the end", (e) => e.hook === "ended" && e.id === String(id));
  assert.deepEqual(story(id), ["start q0", "end q0", "start q1", "end q1", "ended cancelled"]);
  const after = await endedCounts();
  assert.equal((after.cancelled ?? 0) - (before.cancelled ?? 0), 1);
  assert.equal((after.end ?? 0) - (before.end ?? 0), 0);
  // Ended, the id asks for a START.
  const next = await infer("q4", 0);
  assert.match(((await next.json()) as { error: string }).error, /must specify the START flag/);
});

test("a model that is not decoupled: the next step of a sequence whose step timed out waits for its execute() to return", async () => {
  const id = 7;
  const call = (ms: number, flags: { start?: boolean; end?: boolean } = {}) =>
    postJson(`${server.url}/v2/models/steps_unary/infer`, {
      id: `u${ms}`,
      parameters: { sequence_id: id, sequence_start: flags.start ?? false, sequence_end: flags.end ?? false },
      inputs: [{ name: "MS", datatype: "INT32", shape: [1], data: [ms] }],
    });
  assert.equal((await call(0, { start: true })).status, 200);
  const slow = await call(SLEEP_MS);
  assert.equal(slow.status, 503);
  assert.match(slow.body.error as string, /did not answer request 'u1500' within 1000 ms/);
  const answeredAt = Date.now();
  assert.equal((await call(1, { end: true })).status, 200);
  await eventOf(repository.eventsFile, "the end", (e) => e.hook === "ended" && e.id === String(id));
  assert.deepEqual(story(id), [
    "start u0",
    "end u0",
    "start u1500",
    "end u1500",
    "start u1",
    "end u1",
    "ended end",
  ]);
  assertNoOverlap(id);
  assert.ok(answeredAt < at(id, "end", "u1500"));
});

test("a step whose execute() never returns holds its sequence's next step handler_timeout_ms more: then its worker is ended, and its sequences with it", async () => {
  const id = 8;
  const other = 18;
  const call = (sequence: number, rid: string, ms: number, start = false) =>
    postJson(`${server.url}/v2/models/steps_unary/infer`, {
      id: rid,
      parameters: { sequence_id: sequence, sequence_start: start },
      inputs: [{ name: "MS", datatype: "INT32", shape: [1], data: [ms] }],
    });
  assert.equal((await call(other, "o0", 0, true)).status, 200);
  const hung = await call(id, "h0", -1, true);
  assert.equal(hung.status, 503);
  // Nothing waits for it: past the bound, it holds nothing, and the instance goes on.
  await new Promise((resolve) => setTimeout(resolve, TIMEOUT_MS * 1.5));
  assert.equal((await call(other, "o1", 0)).status, 200);
  assert.ok(!logLines.some((l) => l.includes("never returned")));
  // The sequence's next step waits for it: the bound runs from then.
  const next = call(id, "h1", 0);
  const line = await eventually("the log of the ended worker", () =>
    logLines.find((l) => l.includes("never returned")),
  );
  assert.equal(
    JSON.parse(line).msg,
    `the handler code of model 'steps_unary' never returned: its execute() did not return within ${TIMEOUT_MS} ms after request 'h0' of sequence ${id} was answered in its place (timed out or cancelled); ending the worker, whose sequences end`,
  );
  for (const sequence of [id, other]) {
    const gone = await eventually(`sequence ${sequence} ended`, async () => {
      const answer = await call(sequence, "next", 0);
      return answer.status === 400 ? answer : undefined;
    });
    assert.match(gone.body.error as string, /it has ended \(reason 'instance_failed'\)/);
  }
  assert.notEqual((await next).status, 200);
  // The restarted instance serves.
  const fresh = await eventually("the restarted instance", async () => {
    const answer = await call(9, "f0", 0, true);
    return answer.status === 200 ? answer : undefined;
  });
  assert.equal(fresh.status, 200);
});

test("a decoupled request its code never completes after a timeout is let go after handler_timeout_ms more, with a warning; the worker goes on", async () => {
  const id = 26;
  const other = 36;
  const stream = openStream();
  try {
    stream.write(step("steps_detached", "o0", other, 0, { start: true }));
    assert.equal((await stream.answered("o0")).message.error_message ?? "", "");
    stream.write(step("steps_detached", "q0", id, -2, { start: true }));
    stream.write(step("steps_detached", "q1", id, 0, { end: true }));
    const q0 = await stream.answered("q0");
    assert.match(q0.message.error_message ?? "", /did not answer request 'q0'/);
    const q1 = await stream.answered("q1");
    assert.equal(q1.message.error_message ?? "", "");
    // q1 ran only once q0 was let go: the warning that lets it go is in the log by its answer.
    const warning = logLines.find((l) => l.includes("did not complete request 'q0' of sequence 26"));
    assert.ok(warning !== undefined, "q1 waited for q0 to be let go");
    assert.equal(JSON.parse(warning).level, 40);
    // The other sequence lives on: no worker was ended.
    stream.write(step("steps_detached", "o1", other, 0, { end: true }));
    assert.equal((await stream.answered("o1")).message.error_message ?? "", "");
  } finally {
    stream.close();
  }
});
