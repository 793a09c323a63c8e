import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { RateSchedule } from "../../src/bench/rate-schedule.ts";

// The open-loop schedule, with the clock given: 2 lanes at 100 requests/s, so each lane
// has a slot every 20 ms (lane 1 offset by 10 ms); the window opens at 1000 ms.

const schedule = (lane: number) =>
  new RateSchedule({ lanes: 2, lane, rate: 100, start: 0, measureFrom: 1000 });

describe("RateSchedule", () => {
  it("gives each lane its slots in turn, at the rate over all lanes", () => {
    const lane0 = schedule(0);
    const lane1 = schedule(1);
    assert.deepEqual([lane0.next(0), lane0.next(0), lane0.next(0)], [0, 20, 40]);
    assert.deepEqual([lane1.next(0), lane1.next(0)], [10, 30]);
  });

  it("in the measured window a late lane keeps its slots: their latency counts from them", () => {
    const lane = schedule(0);
    assert.equal(lane.next(1000), 1000, "the window's schedule starts when it opens");
    // The server answered the first after 100 ms: the next ones are already due, and count
    // their latency from when they were due.
    assert.deepEqual([lane.next(1100), lane.next(1100), lane.next(1100)], [1020, 1040, 1060]);
    // A window closing at 1100: the slot just given and the one at 1080 are left.
    assert.equal(lane.slotsLeftBefore(1100), 2);
  });

  it("in the warm-up a late lane skips the slots it missed, and the window starts afresh", () => {
    const lane = schedule(1);
    assert.equal(lane.next(0), 10);
    // A cold server took 500 ms: the lane goes on from the next slot, not from 30 ms.
    assert.equal(lane.next(510), 510);
    assert.equal(lane.next(515), 530);
    // Still busy when the window opens: its first measured request is due at the window's
    // first slot for this lane, whatever the warm-up left behind.
    assert.equal(lane.next(1200), 1010);
    assert.equal(lane.next(1200), 1030);
  });

  it("a warm-up slot that would fall in the window gives way to the window's schedule", () => {
    const lane = schedule(1);
    // Asked just before the window: its next warm-up slot (1010) is the window's first.
    assert.equal(lane.next(995), 1010);
    assert.equal(lane.next(1010), 1030, "no slot is given twice");
  });
});
