import assert from "node:assert/strict";
import { readFileSync, writeFileSync } from "node:fs";
import { after, before, it } from "node:test";
import { identityModel } from "../../tools/onnx/test-models.ts";
import { postJson } from "../support/http-client.ts";
import { type OvmsServer, startOvmsServer } from "../tfs/support/ovms-server.ts";

// OVMS's config reload on request (`POST /v1/config/reload`), for a server whose config
// watch is off (--file_system_poll_wait_seconds 0): 200 with every model's status when
// nothing changed, 201 when the file or a model changed and was applied, and a file that
// does not parse refused with OVMS's words, the models serving on as they were; so is a
// reload while a model the file lists failed to load.

const MODEL = { onnx: identityModel("FP32", [-1, 4]) };

let ovms: OvmsServer;
before(async () => {
  ovms = await startOvmsServer({ first: MODEL });
});
after(() => ovms.stop());

const reload = () => postJson(`${ovms.url}/v1/config/reload`, "");
const state = (body: Record<string, unknown>, name: string) =>
  (body[name] as { model_version_status: { state: string }[] } | undefined)?.model_version_status[0]?.state;

it("applies the config file now: 201 with every model's status when it changed, 200 when not", async () => {
  const unchanged = await reload();
  assert.equal(unchanged.status, 200, JSON.stringify(unchanged.body));
  assert.equal(state(unchanged.body, "first"), "AVAILABLE");

  ovms.write({ first: MODEL, second: MODEL });
  const added = await reload();
  assert.equal(added.status, 201, JSON.stringify(added.body));
  assert.deepEqual([state(added.body, "first"), state(added.body, "second")], ["AVAILABLE", "AVAILABLE"]);
  assert.equal((await fetch(`${ovms.url}/v1/models/second`)).status, 200);

  ovms.write({ second: MODEL });
  const removed = await reload();
  assert.equal(removed.status, 201);
  assert.equal(state(removed.body, "first"), "END");
  assert.equal((await reload()).status, 200);
});

it("a config file that does not parse is refused while it stays so; the models serve on", async () => {
  writeFileSync(ovms.configPath, "{ not json");
  for (let i = 0; i < 2; i++) {
    const refused = await reload();
    assert.equal(refused.status, 412);
    assert.deepEqual(refused.body, {
      error: "Reloading config file failed. Check server logs for more info.",
    });
  }
  assert.equal((await fetch(`${ovms.url}/v1/models/second`)).status, 200);
  ovms.write({ second: MODEL, third: MODEL });
  assert.equal((await reload()).status, 201);
  assert.equal((await fetch(`${ovms.url}/v1/models/third`)).status, 200);
});

it("a model the config lists that fails to load fails the reload, on every reload until mended; the others are applied", async () => {
  const failed = { error: "Reloading config file failed. Check server logs for more info." };
  ovms.write({
    second: MODEL,
    broken: { onnx: new TextEncoder().encode("not an ONNX model") },
    fourth: MODEL,
  });
  for (let i = 0; i < 2; i++) {
    const refused = await reload();
    assert.deepEqual([refused.status, refused.body], [500, failed]);
  }
  // The model added beside it is served all the same, as OVMS applies what it can.
  assert.equal((await fetch(`${ovms.url}/v1/models/fourth`)).status, 200);

  // A base_path that does not exist: OVMS's PATH_INVALID, 400.
  ovms.write({ second: MODEL, fourth: MODEL });
  const written = JSON.parse(readFileSync(ovms.configPath, "utf8")) as { model_config_list: object[] };
  written.model_config_list.push({ config: { name: "missing", base_path: "no-such-folder" } });
  writeFileSync(ovms.configPath, JSON.stringify(written));
  const missing = await reload();
  assert.deepEqual([missing.status, missing.body], [400, failed]);

  // An entry OVMS would not load (a stateful model's key on a stateless one): no model, 500.
  ovms.write({
    second: MODEL,
    fourth: MODEL,
    misconfigured: { config: { max_sequence_number: 5 }, onnx: MODEL.onnx },
  });
  const refused = await reload();
  assert.deepEqual([refused.status, refused.body], [500, failed]);
  assert.equal((await fetch(`${ovms.url}/v1/models/misconfigured`)).status, 404);

  ovms.write({ second: MODEL, fourth: MODEL });
  assert.equal((await reload()).status, 201);
  assert.equal((await reload()).status, 200);
});

it("pipelines beside the models are left out; the models are applied", async () => {
  ovms.write({ second: MODEL, fifth: MODEL });
  const written = JSON.parse(readFileSync(ovms.configPath, "utf8")) as Record<string, unknown>;
  writeFileSync(
    ovms.configPath,
    JSON.stringify({
      ...written,
      pipeline_config_list: [{ name: "pipe", inputs: [], nodes: [], outputs: [] }],
    }),
  );
  assert.equal((await reload()).status, 201);
  assert.equal((await fetch(`${ovms.url}/v1/models/fifth`)).status, 200);
});
