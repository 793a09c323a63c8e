import assert from "node:assert/strict";
import { it } from "node:test";
import { type LogLine, memoryLogger } from "../security/support/memory-logger.ts";
import { SILERO_PATH } from "../support/silero-oracle.ts";
import { startOvmsServer } from "./support/ovms-server.ts";

// An OVMS config.json entry's keys about OpenVINO itself are accepted, and the log says,
// one line each, that they have no effect (as the README promises): a user who asked for a
// GPU learns the model runs on the CPU.

it("logs each config.json key that has no effect, once for the model, and serves it", async () => {
  const lines: LogLine[] = [];
  const ovms = await startOvmsServer(
    {
      // Two versions served: the notes are the entry's, said once for the model.
      vad: {
        onnx: { 1: SILERO_PATH, 2: SILERO_PATH },
        config: {
          model_version_policy: { all: {} },
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
    const versions = (await status.json()) as { model_version_status: { version: string; state: string }[] };
    assert.deepEqual(versions.model_version_status.map((v) => [v.version, v.state]).sort(), [
      ["1", "AVAILABLE"],
      ["2", "AVAILABLE"],
    ]);
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
