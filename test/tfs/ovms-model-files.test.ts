import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { addSubModel, identityModel } from "../../tools/onnx/test-models.ts";
import { type LogLine, memoryLogger } from "../security/support/memory-logger.ts";
import { postJson } from "../support/http-client.ts";
import { type OvmsServer, startOvmsServer } from "./support/ovms-server.ts";

// The model file of an OVMS model's version folder is found as OVMS finds it, by its
// extension, whatever its name (a config.json entry, and --model_path alike): the folder's
// one .onnx file; of several, the first in sorted order, which the log names; a folder of
// OpenVINO IR alone is refused saying seqserve serves ONNX only.

const lines: LogLine[] = [];
let ovms: OvmsServer;
let singleDir: string;
before(async () => {
  // The --model_path model's folder.
  singleDir = mkdtempSync(join(tmpdir(), "seqserve-ovms-single-"));
  mkdirSync(join(singleDir, "1"));
  writeFileSync(join(singleDir, "1", "detector.onnx"), identityModel("FP32", [-1, 2]));
  ovms = await startOvmsServer(
    {
      named: { fileName: "resnet.onnx", onnx: addSubModel("INT32", [-1, 2]) },
      // b.onnx (add_sub) sorts after a.onnx (identity): a.onnx is served.
      two: {
        fileName: "b.onnx",
        onnx: addSubModel("INT32", [-1, 2]),
        versionFiles: { "a.onnx": identityModel("INT32", [-1, 2]) },
      },
      ir: {
        fileName: "model.xml",
        onnx: new TextEncoder().encode("<net/>"),
        versionFiles: { "model.bin": new Uint8Array(8) },
      },
    },
    { exitOnError: false, singleModel: { name: "single", basePath: singleDir, stateful: false } },
    memoryLogger(lines),
  );
});
after(async () => {
  await ovms.stop();
  rmSync(singleDir, { recursive: true, force: true });
});

test("a version folder's .onnx file is served whatever its name, from config.json and --model_path", async () => {
  const named = await postJson(`${ovms.url}/v1/models/named:predict`, {
    inputs: { INPUT0: [[5, 7]], INPUT1: [[1, 2]] },
  });
  assert.deepEqual([named.status, named.body], [200, { outputs: { OUTPUT0: [[6, 9]], OUTPUT1: [[4, 5]] } }]);
  const single = await postJson(`${ovms.url}/v1/models/single:predict`, { inputs: { INPUT0: [[0.5, 2]] } });
  assert.deepEqual([single.status, single.body], [200, { outputs: [[0.5, 2]] }]);
});

test("of several .onnx files, the first in sorted order is served, and the log says which", async () => {
  const two = await postJson(`${ovms.url}/v1/models/two:predict`, { inputs: { INPUT0: [[3, 4]] } });
  assert.deepEqual([two.status, two.body], [200, { outputs: [[3, 4]] }]);
  const said = lines.filter((l) => l.event === "model_file" && l.model === "two").map((l) => String(l.msg));
  assert.deepEqual(said, [
    "model 'two' version 1: its folder holds 2 .onnx files; serving 'a.onnx', the first in sorted order",
  ]);
});

test("a folder of OpenVINO IR alone is not loaded, and its status says ONNX only", async () => {
  const status = (await (await fetch(`${ovms.url}/v1/models/ir`)).json()) as {
    model_version_status: { state: string; status: { error_message: string } }[];
  };
  const version = status.model_version_status[0];
  assert.equal(version?.state, "LOADING");
  assert.match(
    version?.status.error_message ?? "",
    /^model 'ir' version 1: folder '.*' holds an OpenVINO IR model \(\.xml\/\.bin\), which seqserve does not serve: ONNX models only/,
  );
});
