import assert from "node:assert/strict";
import { describe, test } from "node:test";
import WebSocket from "ws";
import type { LoadedModel } from "../../src/core/loaded-model.ts";
import { deleteJson, getJson, postJson } from "../support/http-client.ts";
import { startTestServer } from "../support/test-server.ts";
import {
  eventOf,
  eventually,
  type HandlerEvent,
  handlerRepository,
  RECORDER,
  readEvents,
  sequencesOf,
} from "./support/handler-kit.ts";

// A handler's hooks at the right moments, with the Direct and the Oldest strategy alike:
// initialize with the config's parameters, execute with each request's own sequence
// state (a number, a list and a tensor), sequenceEnded with every reason the core can
// produce (`unloaded` included) and the state as the last request left it, and finalize
// at unload. The state
// counts in the sequences API while the sequence lives, and nothing is held afterwards.

const COUNTER = `${RECORDER}
export default {
  initialize(context: any) {
    eventsFile = context.model.parameters.events_file;
    record({ hook: "initialize", instance: context.model.instance, version: context.model.version, parameters: context.model.parameters });
  },
  execute(requests: any[]) {
    record({ hook: "execute", size: requests.length });
    return requests.map((request) => {
      const value = Number(request.inputs.VALUE.data[0]);
      const { state, id, start, end } = request.sequence;
      const sum = (state.get("sum") ?? 0) + value;
      state.set("sum", sum);
      state.set("history", [...(state.get("history") ?? []), value]);
      state.set("last", { datatype: "INT32", shape: [1], data: Int32Array.of(value) });
      record({ hook: "request", id, start, end, value, sum });
      return { outputs: { SUM: { datatype: "INT32", shape: [1, 1], data: Int32Array.of(sum) } } };
    });
  },
  sequenceEnded(sequence: any, reason: string) {
    const last = sequence.state.get("last");
    record({ hook: "sequenceEnded", id: sequence.id, reason, sum: sequence.state.get("sum"), history: sequence.state.get("history"), last: last === undefined ? null : last.data[0] });
  },
  finalize() {
    record({ hook: "finalize" });
  },
};
`;

function counterConfig(strategy: string, eventsFile: string): string {
  return `
backend: "typescript"
max_batch_size: 8
input [ { name: "VALUE" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "SUM" data_type: TYPE_INT32 dims: [ 1 ] } ]
sequence_batching {
  max_sequence_idle_microseconds: 400000
  ${strategy === "direct" ? "direct { }" : "oldest { max_candidate_sequences: 16 }"}
}
instance_group [ { count: 2 kind: KIND_CPU } ]
parameters { key: "events_file" value { string_value: "${eventsFile}" } }
parameters { key: "greeting" value { string_value: "hello" } }
`;
}

function step(url: string, id: number, value: number, flags: { start?: boolean; end?: boolean } = {}) {
  return postJson(`${url}/v2/models/counter/infer`, {
    parameters: { sequence_id: id, sequence_start: flags.start ?? false, sequence_end: flags.end ?? false },
    inputs: [{ name: "VALUE", datatype: "INT32", shape: [1, 1], data: [value] }],
  });
}

const sumOf = (answer: Awaited<ReturnType<typeof step>>): unknown =>
  (answer.body.outputs as { data: unknown[] }[] | undefined)?.[0]?.data[0];

for (const strategy of ["direct", "oldest"]) {
  describe(`handler hooks (${strategy})`, () => {
    test("initialize, execute with per-sequence state, every end reason, finalize", async () => {
      const repository = handlerRepository((eventsFile) => ({
        counter: { config: counterConfig(strategy, eventsFile), files: { "1/model.ts": COUNTER } },
      }));
      const server = await startTestServer(repository.path, { exitTimeoutSecs: 1 });
      const events = repository.eventsFile;
      const ended = (id: number) => (e: HandlerEvent) => e.hook === "sequenceEnded" && e.id === String(id);
      try {
        const initialized = readEvents(events).filter((e) => e.hook === "initialize");
        assert.deepEqual(initialized.map((e) => e.instance).sort(), ["counter_0", "counter_1"]);
        for (const event of initialized) {
          assert.equal(event.version, "1");
          assert.equal((event.parameters as Record<string, string>).greeting, "hello");
        }

        // Two sequences interleaved: each request sees its own sequence's state.
        assert.equal(sumOf(await step(server.url, 11, 5, { start: true })), 5);
        assert.equal(sumOf(await step(server.url, 12, 100, { start: true })), 100);
        assert.equal(sumOf(await step(server.url, 11, 3)), 8);
        assert.equal(sumOf(await step(server.url, 12, 1)), 101);
        const live = await sequencesOf(server.url, "counter");
        assert.equal(live.summary.live, 2);
        assert.ok(live.summary.state_bytes > 0, "the handler's state counts in the sequences API");
        for (const s of live.sequences) assert.ok((s.state_bytes as number) > 0);
        const metrics = await (await fetch(server.metricsUrl)).text();
        assert.match(metrics, /seqserve_sequence_state_bytes\{model="counter",version="1"\} [1-9]/);

        // end: the END request runs, then the handler hears why, with the final state.
        assert.equal(sumOf(await step(server.url, 11, 2, { end: true })), 10);
        const end = await eventOf(events, "sequenceEnded 11", ended(11));
        assert.deepEqual(
          { reason: end.reason, sum: end.sum, history: end.history, last: end.last },
          { reason: "end", sum: 10, history: [5, 3, 2], last: 2 },
        );

        // restart: a START on a live id ends the old life; the new one starts empty.
        assert.equal(sumOf(await step(server.url, 12, 7, { start: true })), 7);
        const restart = await eventOf(events, "sequenceEnded 12 (restart)", ended(12));
        assert.deepEqual({ reason: restart.reason, sum: restart.sum }, { reason: "restart", sum: 101 });

        // forced: the sequences API ends it.
        assert.equal((await deleteJson(`${server.url}/v2/models/counter/sequences/12`)).status, 200);
        const forced = await eventually("sequenceEnded 12 (forced)", () =>
          readEvents(events).find((e) => ended(12)(e) && e.reason === "forced"),
        );
        assert.equal(forced.sum, 7);

        // timeout: no request within max_sequence_idle_microseconds.
        await step(server.url, 13, 1, { start: true });
        const timeout = await eventOf(events, "sequenceEnded 13", ended(13));
        assert.deepEqual({ reason: timeout.reason, sum: timeout.sum }, { reason: "timeout", sum: 1 });

        // cancelled: a WebSocket stream whose connection drops.
        const socket = new WebSocket(
          `${server.url.replace("http", "ws")}/v2/models/counter/stream?sequence_id=14`,
        );
        await new Promise((resolve, reject) => socket.once("open", resolve).once("error", reject));
        const answered = new Promise((resolve) => socket.once("message", resolve));
        socket.send(
          JSON.stringify({ inputs: [{ name: "VALUE", datatype: "INT32", shape: [1, 1], data: [4] }] }),
        );
        await answered;
        socket.terminate();
        const cancelled = await eventOf(events, "sequenceEnded 14", ended(14));
        assert.deepEqual({ reason: cancelled.reason, sum: cancelled.sum }, { reason: "cancelled", sum: 4 });

        // expired: a sequence opened with an expiry (a SageMaker session) reaches it.
        const model = server.server.repository.model("counter");
        model.sequences!.open(15n, { expiresAtMs: Date.now() + 300 });
        assert.equal(sumOf(await step(server.url, 15, 9)), 9);
        const expired = await eventOf(events, "sequenceEnded 15", ended(15));
        assert.deepEqual({ reason: expired.reason, sum: expired.sum }, { reason: "expired", sum: 9 });

        // Every end freed the state.
        const after = await sequencesOf(server.url, "counter");
        assert.deepEqual(after.sequences, []);
        assert.equal(after.summary.state_bytes, 0);
        for (const reason of ["end", "restart", "forced", "timeout", "cancelled", "expired"]) {
          assert.ok(after.summary.ended[reason]! >= 1, `ended by ${reason}`);
        }

        // shutdown: a sequence still live when the server stops (one with a far expiry, which
        // the idle timeout leaves alone while the server waits for it); then finalize, once
        // per instance.
        model.sequences!.open(16n, { expiresAtMs: Date.now() + 600_000 });
        await step(server.url, 16, 6);
        await server.stop();
        const shutdown = await eventOf(events, "sequenceEnded 16", ended(16));
        assert.deepEqual({ reason: shutdown.reason, sum: shutdown.sum }, { reason: "shutdown", sum: 6 });
        const finalized = await eventually("finalize", () => {
          const all = readEvents(events);
          return all.filter((e) => e.hook === "finalize").length === 2 ? all : undefined;
        });
        // Nothing reaches a handler after its finalize.
        const lastFinalize = finalized.findLastIndex((e) => e.hook === "finalize");
        assert.ok(finalized.slice(lastFinalize + 1).every((e) => e.hook === "finalize"));
        assert.ok(finalized.findIndex((e) => e.hook === "finalize") > finalized.indexOf(shutdown));
      } finally {
        await server.stop();
        repository.remove();
      }
    });
  });
}

test("a model unloaded with a live sequence: sequenceEnded 'unloaded', then finalize", async () => {
  const repository = handlerRepository((eventsFile) => ({
    counter: { config: counterConfig("oldest", eventsFile), files: { "1/model.ts": COUNTER } },
  }));
  const server = await startTestServer(repository.path);
  try {
    assert.equal(sumOf(await step(server.url, 21, 4, { start: true })), 4);
    // What the repository does when a model leaves (an unload, a config without it):
    // live sequences get no grace here.
    const model = server.server.repository.model("counter") as unknown as LoadedModel;
    await model.unload(Date.now(), "unloaded");
    const unloaded = await eventOf(
      repository.eventsFile,
      "sequenceEnded 21",
      (e) => e.hook === "sequenceEnded",
    );
    assert.deepEqual(
      { id: unloaded.id, reason: unloaded.reason, sum: unloaded.sum },
      { id: "21", reason: "unloaded", sum: 4 },
    );
    const events = await eventually("finalize of both instances", () => {
      const all = readEvents(repository.eventsFile);
      return all.filter((e) => e.hook === "finalize").length === 2 ? all : undefined;
    });
    // The sequence's end reached its handler before that instance was finalized (the other
    // instance, which held nothing, may finalize at any time): before the last finalize.
    assert.ok(
      events.findIndex((e) => e.hook === "sequenceEnded") <
        events.findLastIndex((e) => e.hook === "finalize"),
    );
  } finally {
    await server.stop();
    repository.remove();
  }
});

test("handler requests without sequences: batches of requests, one response each, status and metadata", async () => {
  const handler = `
export const metadata = {
  inputs: [{ name: "TEXT", datatype: "BYTES", shape: [-1, 1] }],
  outputs: [{ name: "LENGTH", datatype: "INT32", shape: [-1, 1] }, { name: "UPPER", datatype: "BYTES", shape: [-1, 1] }],
};
export default class {
  execute(requests: any[]) {
    return requests.map((r) => {
      const text = new TextDecoder().decode(r.inputs.TEXT.data[0]);
      return { outputs: { LENGTH: { datatype: "INT32", shape: [1, 1], data: Int32Array.of(text.length) }, UPPER: { datatype: "BYTES", shape: [1, 1], data: [text.toUpperCase()] } } };
    });
  }
}
`;
  const repository = handlerRepository({ upper: { files: { "1/model.ts": handler } } });
  const server = await startTestServer(repository.path);
  try {
    const metadata = await getJson(`${server.url}/v2/models/upper`);
    assert.equal(metadata.status, 200);
    assert.deepEqual(metadata.body.inputs, [{ name: "TEXT", datatype: "BYTES", shape: [-1, 1] }]);
    const config = await getJson(`${server.url}/v2/models/upper/config`);
    assert.equal(config.body.backend, "typescript");
    const answers = await Promise.all(
      ["a", "bb", "ccc", "dddd"].map((text) =>
        postJson(`${server.url}/v2/models/upper/infer`, {
          inputs: [{ name: "TEXT", datatype: "BYTES", shape: [1, 1], data: [text] }],
        }),
      ),
    );
    assert.deepEqual(
      answers.map((a) => (a.body.outputs as { name: string; data: unknown[] }[]).map((o) => o.data[0])),
      [
        [1, "A"],
        [2, "BB"],
        [3, "CCC"],
        [4, "DDDD"],
      ],
    );
    const only = await postJson(`${server.url}/v2/models/upper/infer`, {
      inputs: [{ name: "TEXT", datatype: "BYTES", shape: [1, 1], data: ["x"] }],
      outputs: [{ name: "UPPER" }],
    });
    assert.deepEqual(
      (only.body.outputs as { name: string }[]).map((o) => o.name),
      ["UPPER"],
    );
  } finally {
    await server.stop();
    repository.remove();
  }
});
