import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { identityModel } from "../../tools/onnx/test-models.ts";
import { postJson } from "../support/http-client.ts";
import { type OvmsServer, startOvmsServer } from "./support/ovms-server.ts";

// A model of an OVMS config.json whose load failed (its file, or its entry, which OVMS
// checks model by model) is answered as OVMS answers a version not loaded: 404 "Model
// with requested version is not loaded yet", named or not; the others serve.

let ovms: OvmsServer;
before(async () => {
  ovms = await startOvmsServer(
    {
      fine: { onnx: identityModel("FP32", [-1, 4]) },
      broken: { onnx: new TextEncoder().encode("not an ONNX model") },
      // A stateful model's key on a stateless one: OVMS leaves this model out, not the file.
      misconfigured: { config: { idle_sequence_cleanup: false }, onnx: identityModel("FP32", [-1, 4]) },
    },
    { exitOnError: false },
  );
});
after(() => ovms.stop());

test("a model whose load failed is not loaded yet, named with a version or not; the others serve", async () => {
  for (const path of ["/v1/models/broken:predict", "/v1/models/broken/versions/1:predict"]) {
    const answer = await postJson(`${ovms.url}${path}`, { inputs: { INPUT0: [[1, 2, 3, 4]] } });
    assert.deepEqual(
      [path, answer.status, answer.body],
      [path, 404, { error: "Model with requested version is not loaded yet" }],
    );
  }
  // Its entry refused, it is no model at all, as in OVMS.
  const misconfigured = await postJson(`${ovms.url}/v1/models/misconfigured:predict`, {
    inputs: { INPUT0: [[1, 2, 3, 4]] },
  });
  assert.deepEqual(
    [misconfigured.status, misconfigured.body],
    [404, { error: "Model with requested name is not found" }],
  );
  const fine = await postJson(`${ovms.url}/v1/models/fine:predict`, { inputs: { INPUT0: [[1, 2, 3, 4]] } });
  assert.deepEqual([fine.status, fine.body], [200, { outputs: [[1, 2, 3, 4]] }]);
});

test("a version whose load failed is listed as OVMS lists it: LOADING, error UNKNOWN; a healthy one's message is OK", async () => {
  const status = async (name: string) =>
    (
      (await (await fetch(`${ovms.url}/v1/models/${name}`)).json()) as {
        model_version_status: { state: string; status: { error_code: string; error_message: string } }[];
      }
    ).model_version_status[0];
  const broken = await status("broken");
  assert.deepEqual([broken?.state, broken?.status.error_code], ["LOADING", "UNKNOWN"]);
  const fine = await status("fine");
  assert.deepEqual([fine?.state, fine?.status], ["AVAILABLE", { error_code: "OK", error_message: "OK" }]);
});
