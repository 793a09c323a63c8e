import assert from "node:assert/strict";
import { test } from "node:test";
import type { PartialResponse } from "../../src/core/executor.ts";
import { ResponseChannel, type StreamedInferResponse } from "../../src/core/response-stream.ts";

// What a decoupled request's responses hold while they wait to be taken, reported to the
// frontend that counts them in its connection's budget: each arrival adds its bytes, and
// each response taken or dropped gives them back, so the sum returns to zero however the
// request ends.

const toResponse = (partial: PartialResponse): StreamedInferResponse => ({
  modelName: "m",
  modelVersion: "1",
  id: "r",
  parameters: partial.parameters,
  outputs: [],
  final: partial.final,
});

const partial = (final = false): PartialResponse => ({ outputs: new Map(), parameters: {}, final });

test("responses waiting to be taken are reported as they arrive and as they are taken", async () => {
  const channel = new ResponseChannel(() => {}, toResponse);
  const changes: number[] = [];
  channel.push(partial(), 100);
  // A listener that comes late hears at once what already waits.
  channel.onWaiting((change) => changes.push(change));
  channel.push(partial(), 50);
  assert.deepEqual(changes, [100, 50]);
  const iterator = channel[Symbol.asyncIterator]();
  await iterator.next();
  assert.deepEqual(changes, [100, 50, -100]);
  channel.push(partial(true), 25);
  channel.finish();
  await iterator.next();
  await iterator.next();
  assert.equal((await iterator.next()).done, true);
  assert.deepEqual(changes, [100, 50, -100, 25, -50, -25]);
});

test("a cancelled request's waiting responses are given back at once", () => {
  let cancelled = 0;
  const channel = new ResponseChannel(() => cancelled++, toResponse);
  let waiting = 0;
  channel.onWaiting((change) => {
    waiting += change;
  });
  channel.push(partial(), 4096);
  channel.push(partial(), 4096);
  assert.equal(waiting, 8192);
  channel.cancel();
  assert.equal(waiting, 0);
  assert.equal(cancelled, 1);
  // Nothing arriving after the end is counted.
  channel.push(partial(), 4096);
  assert.equal(waiting, 0);
});
