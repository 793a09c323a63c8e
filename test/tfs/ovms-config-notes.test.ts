import assert from "node:assert/strict";
import { it } from "node:test";
import { type LogLine, memoryLogger } from "../security/support/memory-logger.ts";
import { SILERO_OVMS, startOvmsServer } from "./support/ovms-server.ts";

// An OVMS config.json entry's keys about OpenVINO itself are accepted, and the log says,
// one line each, that they have no effect (as the README promises): a user who asked for a
// GPU learns the model runs on the CPU.

it("logs each config.json key that has no effect, once per load, and serves the model", async () => {
  const lines: LogLine[] = [];
  const ovms = await startOvmsServer(
    {
      vad: {
        ...SILERO_OVMS,
        config: {
          stateful: true,
          nireq: 4,
          target_device: "GPU",
          low_latency_transformation: true,
          shape: "auto",
          plugin_config: { PERFORMANCE_HINT: "LATENCY" },
        },
      },
    },
    {},
    memoryLogger(lines),
  );
  try {
    const status = await fetch(`${ovms.url}/v1/models/vad`);
    assert.equal(status.status, 200);
    const notes = lines
      .filter((l) => l.event === "config_note" && l.model === "vad")
      .map((l) => String(l.msg));
    for (const expected of [
      "'nireq' of model 'vad' has no effect on ONNX models in seqserve",
      "'shape' of model 'vad' has no effect on ONNX models in seqserve",
      "'plugin_config' of model 'vad' has no effect on ONNX models in seqserve",
      "'low_latency_transformation' of model 'vad' has no effect on ONNX models in seqserve",
      "model 'vad' asks for target_device 'GPU'; seqserve runs it on the CPU",
    ]) {
      assert.equal(notes.filter((n) => n === expected).length, 1, `${expected} in ${JSON.stringify(notes)}`);
    }
  } finally {
    await ovms.stop();
  }
});
