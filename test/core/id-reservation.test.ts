import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { IdReservation } from "../../src/core/sequence/id-reservation.ts";

// Server-assigned ids come from blocks reserved in the shared tier. The next block is
// asked for once half of the current one is used, so that taking an id stays synchronous
// while the tier answers: a server that only asked when the block ran out made one start
// in every block wait for the tier.

/** A tier whose reservations resolve when the test says, numbering blocks from 100. */
function tier() {
  const asked: { count: number; answer: () => void }[] = [];
  let next = 100n;
  const reserve = (count: number): Promise<bigint> =>
    new Promise((resolve) => {
      const first = next;
      next += BigInt(count);
      asked.push({ count, answer: () => resolve(first) });
    });
  return { asked, reserve };
}

describe("IdReservation", () => {
  it("asks for the next block once half of the current one is used, before it runs out", async () => {
    const { asked, reserve } = tier();
    const ids = new IdReservation(reserve, 4);
    const ready = ids.ready();
    assert.equal(asked.length, 1);
    asked[0]!.answer();
    await ready;

    assert.equal(ids.take(), 100n);
    assert.equal(ids.take(), 101n);
    assert.equal(asked.length, 1, "half the block is left: no reservation yet");
    assert.equal(ids.take(), 102n);
    assert.equal(asked.length, 2, "less than half is left: the next block is asked for");
    assert.equal(ids.take(), 103n, "the last id of the block, still at once");
    assert.equal(ids.take(), undefined, "the next block has not come yet");
    assert.equal(asked.length, 2, "one reservation at a time");

    asked[1]!.answer();
    await ids.ready();
    assert.deepEqual([ids.take(), ids.take()], [104n, 105n]);
  });

  it("ready() waits for a block only when none is held", async () => {
    const { asked, reserve } = tier();
    const ids = new IdReservation(reserve, 8);
    const first = ids.ready();
    asked[0]!.answer();
    await first;
    // A block is held: ready() settles with no reservation asked for (none would be answered).
    await ids.ready();
    assert.equal(asked.length, 1);
  });

  it("drop() forgets the blocks held and the one being asked for: the next ids come from a new block", async () => {
    // The tier lost the counter those blocks were counted from (Redis restarted without
    // persistence): ids go on from the counter it keeps now, not from blocks of the old one.
    const { asked, reserve } = tier();
    const ids = new IdReservation(reserve, 4);
    const ready = ids.ready();
    asked[0]!.answer();
    await ready;
    assert.deepEqual([ids.take(), ids.take(), ids.take()], [100n, 101n, 102n]);
    assert.equal(asked.length, 2, "the next block is being asked for");

    ids.drop();
    const waited = ids.ready();
    asked[1]!.answer();
    await waited;
    assert.equal(ids.take(), undefined, "103 and the block asked for before the drop are not given out");
    assert.equal(asked.length, 3);
    asked[2]!.answer();
    await ids.ready();
    assert.equal(ids.take(), 108n);
  });
});
