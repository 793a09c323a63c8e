import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";
import { type OvmsServer, SILERO_OVMS, startOvmsServer } from "../tfs/support/ovms-server.ts";
import { restStep } from "../tfs/support/vad-steps.ts";

// OVMS takes any uint32 for --file_system_poll_wait_seconds and
// --sequence_cleaner_poll_wait_minutes. Periods past 24.8 days are longer than a Node
// timer can wait: such a timer fired every millisecond instead, re-reading config.json
// and re-checking idle sequences without pause, each time with a warning.

describe("OVMS poll periods longer than a Node timer can wait", () => {
  let ovms: OvmsServer;
  const overflows: string[] = [];
  const onWarning = (warning: Error): void => {
    if (warning.name === "TimeoutOverflowWarning") overflows.push(warning.message);
  };
  before(async () => {
    process.on("warning", onWarning);
    ovms = await startOvmsServer(
      { vad: SILERO_OVMS },
      { configPollSecs: 3_000_000, sequenceCleanerPollWaitMinutes: 40_000 },
    );
  });
  after(async () => {
    process.off("warning", onWarning);
    await ovms.stop();
  });

  it("are kept as long waits: no timer overflows, and a live sequence lives on", async () => {
    const start = await restStep(ovms.url, "vad", { control: 1 });
    if (!start.ok) assert.fail(start.message);
    await sleep(200);
    const next = await restStep(ovms.url, "vad", { id: start.id });
    if (!next.ok) assert.fail(next.message);
    assert.deepEqual(overflows, []);
  });
});
