import assert from "node:assert/strict";
import { it } from "node:test";
import { identityModel } from "../../tools/onnx/test-models.ts";
import { type LogLine, memoryLogger } from "../security/support/memory-logger.ts";
import { postJson } from "../support/http-client.ts";
import { startOvmsServer } from "./support/ovms-server.ts";

// MediaPipe graphs listed in `model_config_list`, as OVMS recommends (docs/mediapipe.md):
// with graph_path and subconfig, or by name alone. seqserve serves no graphs: it starts,
// logs that each is left out, and serves the models beside them. (Both forms stopped it
// from starting: "unknown key 'graph_path'", "must have a non-empty 'base_path'".)

it("leaves MediaPipe graphs of model_config_list out with a warning, and serves the models", async () => {
  const lines: LogLine[] = [];
  const ovms = await startOvmsServer(
    {
      fine: { onnx: identityModel("FP32", [-1, 4]) },
      graph1: {
        config: { base_path: "models/graph1", graph_path: "graph.pbtxt", subconfig: "subconfig.json" },
        files: { "models/graph1/graph.pbtxt": 'input_stream: "in"\n', "models/graph1/subconfig.json": "{}" },
      },
      // By name alone: its graph is graph.pbtxt in the folder of its name.
      g: { config: { base_path: undefined }, files: { "g/graph.pbtxt": 'input_stream: "in"\n' } },
    },
    {},
    memoryLogger(lines),
  );
  try {
    const fine = await postJson(`${ovms.url}/v1/models/fine:predict`, { inputs: { INPUT0: [[1, 2, 3, 4]] } });
    assert.deepEqual([fine.status, fine.body], [200, { outputs: [[1, 2, 3, 4]] }]);
    for (const graph of ["graph1", "g"]) {
      const answer = await postJson(`${ovms.url}/v1/models/${graph}:predict`, { inputs: {} });
      assert.deepEqual(
        [graph, answer.status, answer.body],
        [graph, 404, { error: "Model with requested name is not found" }],
      );
      const note = lines.find(
        (l) => l.event === "config_note" && String(l.msg).includes(`'${graph}' in 'model_config_list'`),
      );
      assert.ok(note !== undefined, `a note for ${graph}`);
      assert.equal(note.level, 40);
      assert.match(
        String(note.msg),
        /is a MediaPipe graph \(.*graph\.pbtxt\), which seqserve does not serve: it is left out$/,
      );
    }
  } finally {
    await ovms.stop();
  }
});
