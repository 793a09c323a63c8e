import assert from "node:assert/strict";
import { test } from "node:test";
import { StateStoreLog } from "../../src/observability/state-store-log.ts";
import { type LogLine, memoryLogger } from "../security/support/memory-logger.ts";

// What the state store's log says while a store hovers at its limit: a full Redis takes a
// write now and then (an end freed room) among the ones it refuses. One such answer is no
// recovery: the failures go on being summed up, and the store is said to answer again only
// after a quiet while.

test("a store at its limit, taking a write now and then, is not said to answer again until it is quiet", async () => {
  const lines: LogLine[] = [];
  const log = new StateStoreLog(memoryLogger(lines), "redis://store");
  const events = () => lines.map((line) => line.event);
  log.failed("write", "full", "the state store is full");
  log.answered("write");
  log.failed("write", "full", "the state store is full");
  log.answered("write");
  assert.deepEqual(events(), ["state_store_failing"]);
  await new Promise((resolve) => setTimeout(resolve, 1100));
  log.answered("write");
  assert.deepEqual(events(), ["state_store_failing", "state_store_failures", "state_store_recovered"]);
  assert.match(String(lines.at(-1)!.msg), /answers again: 2 request\(s\) failed since /);
});
