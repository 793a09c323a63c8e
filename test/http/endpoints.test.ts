import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { SERVER_METADATA } from "./support/fake-context.ts";
import { bodyJson, send, startServer, type TestServer } from "./support/http-server.ts";

describe("KServe v2 HTTP endpoints", () => {
  let server: TestServer;
  before(async () => {
    server = await startServer();
  });
  after(() => server.close());

  it("GET /v2 answers the server metadata", async () => {
    const response = await fetch(`${server.url}/v2`);
    assert.equal(response.status, 200);
    assert.match(response.headers.get("content-type") ?? "", /^application\/json/);
    assert.deepEqual(await response.json(), {
      name: SERVER_METADATA.name,
      version: SERVER_METADATA.version,
      extensions: SERVER_METADATA.extensions,
    });
  });

  it("health endpoints answer 200 with an empty body, 400 with an error when not healthy", async () => {
    for (const which of ["live", "ready"] as const) {
      const ok = await send(server, "GET", `/v2/health/${which}`);
      assert.equal(ok.status, 200);
      assert.equal(ok.body.byteLength, 0);
      server.fake.health[which] = false;
      const bad = await send(server, "GET", `/v2/health/${which}`);
      server.fake.health[which] = true;
      assert.equal(bad.status, 400);
      assert.deepEqual(bodyJson(bad), { error: `server is not ${which}` });
    }
  });

  it("model ready answers 200 for a ready model and version, 400 otherwise", async () => {
    assert.equal((await send(server, "GET", "/v2/models/echo/ready")).status, 200);
    assert.equal((await send(server, "GET", "/v2/models/versioned/versions/3/ready")).status, 200);
    const missing = await send(server, "GET", "/v2/models/nope/ready");
    assert.equal(missing.status, 400);
    assert.deepEqual(bodyJson(missing), { error: "model 'nope' is not ready" });
    const wrongVersion = await send(server, "GET", "/v2/models/versioned/versions/2/ready");
    assert.equal(wrongVersion.status, 400);
    assert.deepEqual(bodyJson(wrongVersion), { error: "version 2 of model 'versioned' is not ready" });
  });

  it("model metadata, with and without a version", async () => {
    const expected = {
      name: "half",
      versions: ["1"],
      platform: "onnxruntime_onnx",
      inputs: [{ name: "INPUT0", datatype: "FP16", shape: [-1] }],
      outputs: [
        { name: "OUTPUT0", datatype: "FP16", shape: [-1] },
        { name: "OUTPUT1", datatype: "FP32", shape: [-1] },
      ],
    };
    assert.deepEqual(bodyJson(await send(server, "GET", "/v2/models/half")), expected);
    assert.deepEqual(bodyJson(await send(server, "GET", "/v2/models/half/versions/1")), expected);
    const unknown = await send(server, "GET", "/v2/models/nope");
    assert.equal(unknown.status, 404);
    assert.deepEqual(bodyJson(unknown), { error: "Request for unknown model: 'nope' is not found" });
  });

  it("a version that is not a number is refused", async () => {
    const response = await send(server, "GET", "/v2/models/echo/versions/latest");
    assert.equal(response.status, 400);
    assert.deepEqual(bodyJson(response), {
      error:
        "failed to get model version from specified version string 'latest', version should be an integral value > 0",
    });
  });

  it("model config", async () => {
    const response = await send(server, "GET", "/v2/models/raw_fp32/config");
    assert.equal(response.status, 200);
    assert.deepEqual(bodyJson(response), {
      name: "raw_fp32",
      platform: "onnxruntime_onnx",
      max_batch_size: 8,
    });
    const versioned = await send(server, "GET", "/v2/models/versioned/versions/3/config");
    assert.equal((bodyJson(versioned) as { name: string }).name, "versioned");
  });

  it("statistics for every model, one model, one version", async () => {
    const infer = await fetch(`${server.url}/v2/models/versioned/versions/3/infer`, {
      method: "POST",
      body: JSON.stringify({ inputs: [{ name: "X", datatype: "INT32", shape: [1], data: [1] }] }),
    });
    assert.equal(infer.status, 200);
    const all = bodyJson(await send(server, "GET", "/v2/models/stats")) as {
      model_stats: { name: string }[];
    };
    assert.deepEqual(
      all.model_stats.map((s) => s.name),
      [...server.fake.registry.models.keys()],
    );
    type Stats = { model_stats: { name: string; version: string; inference_count: number }[] };
    const one = bodyJson(await send(server, "GET", "/v2/models/versioned/stats")) as Stats;
    assert.equal(one.model_stats.length, 1);
    assert.equal(one.model_stats[0]?.inference_count, 1);
    const version = bodyJson(await send(server, "GET", "/v2/models/versioned/versions/3/stats")) as Stats;
    assert.equal(version.model_stats[0]?.version, "3");
    assert.equal((await send(server, "GET", "/v2/models/nope/stats")).status, 404);
  });

  it("repository index, all or ready only, with or without a body", async () => {
    const all = await send(server, "POST", "/v2/repository/index");
    assert.equal(all.status, 200);
    const entries = bodyJson(all) as { name: string; state: string }[];
    assert.ok(entries.some((e) => e.name === "broken" && e.state === "UNAVAILABLE"));
    const ready = bodyJson(
      await send(server, "POST", "/v2/repository/index", JSON.stringify({ ready: true }), {
        "content-type": "application/json",
      }),
    ) as { name: string }[];
    assert.ok(!ready.some((e) => e.name === "broken"));
    assert.ok(ready.some((e) => e.name === "echo"));
    const bad = await send(server, "POST", "/v2/repository/index", JSON.stringify({ ready: "yes" }));
    assert.equal(bad.status, 400);
    assert.deepEqual(bodyJson(bad), { error: "Unable to parse 'ready': expected a bool" });
  });

  it("load passes the config and file parameters, unload the name", async () => {
    const plain = await send(server, "POST", "/v2/repository/models/echo/load");
    assert.equal(plain.status, 200);
    const config = JSON.stringify({ max_batch_size: 4 });
    const withConfig = await send(
      server,
      "POST",
      "/v2/repository/models/echo/load",
      JSON.stringify({ parameters: { config } }),
      { "content-type": "application/json" },
    );
    assert.equal(withConfig.status, 200);
    assert.deepEqual(server.fake.registry.loads.slice(-2), [
      { name: "echo", config: undefined },
      { name: "echo", config },
    ]);
    const failed = await send(server, "POST", "/v2/repository/models/broken/load");
    assert.equal(failed.status, 400);
    assert.deepEqual(bodyJson(failed), { error: "failed to load 'broken': no model file" });
    const files = await send(
      server,
      "POST",
      "/v2/repository/models/echo/load",
      JSON.stringify({
        parameters: { config: "{}", "file:1/model.onnx": Buffer.from("onnx").toString("base64") },
      }),
    );
    assert.equal(files.status, 200);
    // Sent files reach the repository decoded from base64.
    assert.deepEqual(server.fake.registry.loads.at(-1), {
      name: "echo",
      config: "{}",
      files: ["1/model.onnx:onnx"],
    });

    const unload = await send(
      server,
      "POST",
      "/v2/repository/models/echo/unload",
      JSON.stringify({ parameters: { unload_dependents: false } }),
    );
    assert.equal(unload.status, 200);
    assert.deepEqual(server.fake.registry.unloads, ["echo"]);
    const unknown = await send(server, "POST", "/v2/repository/models/nope/unload");
    assert.equal(unknown.status, 404);
  });

  it("an unknown route is a 404 with an error body; a known one under another method a 405, as in Triton", async () => {
    const response = await send(server, "GET", "/v2/nothing/here");
    assert.equal(response.status, 404);
    assert.deepEqual(bodyJson(response), { error: "Not Found: no route for GET /v2/nothing/here" });
    const wrongMethod = await send(server, "DELETE", "/v2/models/echo/infer?x=1");
    assert.equal(wrongMethod.status, 405);
    assert.equal(wrongMethod.headers.allow, "POST");
    assert.deepEqual(bodyJson(wrongMethod), {
      error: "Method Not Allowed: /v2/models/echo/infer answers POST, not DELETE",
    });
    const versioned = await send(server, "POST", "/v2/models/echo/versions/1/ready/");
    assert.equal(versioned.status, 405);
    assert.equal(versioned.headers.allow, "GET, HEAD");
  });
});

describe("sequence endpoints", () => {
  let server: TestServer;
  before(async () => {
    server = await startServer();
  });
  after(() => server.close());

  it("lists live sequences with exact ids and their type", async () => {
    const response = await send(server, "GET", "/v2/models/stateful/sequences");
    assert.equal(response.status, 200);
    const text = response.body.toString("utf8");
    // uint64 ids are JSON numbers with their exact digits, string ids are strings.
    assert.match(text, /"id":18446744073709551615,"id_type":"uint64"/);
    assert.match(text, /"id":9007199254740993,"id_type":"uint64"/);
    assert.match(text, /"id":"session-a","id_type":"string"/);
    assert.match(text, /"id":"123","id_type":"string"/);
    const json = JSON.parse(text) as {
      sequences: Record<string, unknown>[];
      summary: Record<string, unknown>;
    };
    assert.deepEqual(json.sequences[2], {
      id: "session-a",
      id_type: "string",
      status: "active",
      age_ms: 1500,
      idle_ms: 20,
      steps: 7,
      queued: 0,
      state_bytes: 1024,
      instance: "stateful_0",
      slot: 2,
      expires_at: null,
    });
    assert.equal(json.summary.live, 4);
    assert.equal(json.summary.state_bytes, 4096);
    const versioned = await send(server, "GET", "/v2/models/stateful/versions/1/sequences");
    assert.equal(versioned.status, 200);
  });

  it("a model without sequence batching has no sequences", async () => {
    const response = await send(server, "GET", "/v2/models/echo/sequences");
    assert.equal(response.status, 404);
    assert.deepEqual(bodyJson(response), {
      error: "model 'echo' has no sequences: it is not served with sequence batching",
    });
  });

  it("DELETE ends a sequence by uint64 id, string id, or digits forced to a string", async () => {
    const sequences = server.fake.sequences;
    assert.equal(
      (await send(server, "DELETE", "/v2/models/stateful/sequences/18446744073709551615")).status,
      200,
    );
    assert.equal((await send(server, "DELETE", "/v2/models/stateful/sequences/session-a")).status, 200);
    assert.equal(
      (await send(server, "DELETE", "/v2/models/stateful/versions/1/sequences/123?id_type=string")).status,
      200,
    );
    assert.deepEqual(sequences.ended, [18446744073709551615n, "session-a", "123"]);

    const again = await send(server, "DELETE", "/v2/models/stateful/sequences/18446744073709551615");
    assert.equal(again.status, 404);
    assert.deepEqual(bodyJson(again), {
      error: "sequence 18446744073709551615 is not live in model 'stateful'",
    });
    const tooBig = await send(server, "DELETE", "/v2/models/stateful/sequences/18446744073709551616");
    assert.equal(tooBig.status, 400);
    assert.deepEqual(bodyJson(tooBig), { error: "sequence id '18446744073709551616' is not a uint64" });
    const list = bodyJson(await send(server, "GET", "/v2/models/stateful/sequences")) as {
      sequences: unknown[];
    };
    assert.equal(list.sequences.length, 1);
  });
});
