import assert from "node:assert/strict";
import { test } from "node:test";
import {
  MAX_RESPONSE_INDEX,
  RequestResponses,
  ResponseStatistics,
} from "../../src/core/response-statistics.ts";

test("responses are kept by index up to MAX_RESPONSE_INDEX, the counters growing with the longest request", () => {
  const stats = new ResponseStatistics();
  stats.record(0, "success", 100, 10);
  stats.record(20, "empty_response", 50);
  stats.record(MAX_RESPONSE_INDEX - 1, "fail", 7);
  stats.record(MAX_RESPONSE_INDEX, "success", 1, 1);
  const snapshot = stats.snapshot();
  assert.equal(Object.keys(snapshot).length, MAX_RESPONSE_INDEX, "indexes 0 … MAX − 1, none past it");
  assert.deepEqual(snapshot["0"], {
    compute_infer: { count: 1, ns: 100 },
    compute_output: { count: 1, ns: 10 },
    success: { count: 1, ns: 110 },
    fail: { count: 0, ns: 0 },
    empty_response: { count: 0, ns: 0 },
    cancel: { count: 0, ns: 0 },
  });
  assert.deepEqual(snapshot["1"]!.compute_infer, { count: 0, ns: 0 }, "an index between is there, empty");
  assert.deepEqual(snapshot["20"]!.empty_response, { count: 1, ns: 50 });
  assert.deepEqual(snapshot[String(MAX_RESPONSE_INDEX - 1)]!.fail, { count: 1, ns: 7 });
});

test("a request's responses: each sent one timed from the last, then how it ended", () => {
  const stats = new ResponseStatistics();
  const completed = new RequestResponses(stats);
  completed.sent(1000, 1500, 1600, false);
  completed.sent(1000, 2600, 2700, false);
  completed.ended(1000, 3000, false);
  const flaggedFinal = new RequestResponses(stats);
  flaggedFinal.sent(1000, 1100, 1200, true);
  flaggedFinal.ended(1000, 1300, false);
  const cancelled = new RequestResponses(stats);
  cancelled.sent(1000, 1100, 1200, false);
  cancelled.cancelled(2000);
  cancelled.sent(1000, 2100, 2200, false);
  cancelled.ended(1000, 2500, true);
  const neverRan = new RequestResponses(stats);
  neverRan.cancelled(10);
  neverRan.ended(0, 20, true);
  const s = stats.snapshot();
  assert.deepEqual(Object.keys(s), ["0", "1", "2"]);
  assert.deepEqual(s["0"]!.success, { count: 3, ns: 600 + 200 + 200 });
  assert.deepEqual(s["1"]!.success, { count: 1, ns: 1000 + 100 }, "timed from the previous response");
  assert.deepEqual(s["1"]!.cancel, { count: 1, ns: 500 }, "a response after the cancel is not one");
  assert.deepEqual(s["2"]!.empty_response, { count: 1, ns: 300 });
});
