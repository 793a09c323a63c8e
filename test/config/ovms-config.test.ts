import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { describe, it } from "node:test";
import { parseOvmsConfig, readOvmsConfig, resolveModelConfig } from "../../src/config/index.ts";
import { assertConfigError, FIXTURES } from "./config-assertions.ts";
import { MODEL_IO, tensor } from "./model-io-fixtures.ts";

const OVMS_FILE = join(FIXTURES, "ovms", "config.json");
const FILE = "ovms/config.json";

const parse = (models: unknown, extra: Record<string, unknown> = {}) =>
  parseOvmsConfig(JSON.stringify({ model_config_list: models, ...extra }, null, 2), FILE);

describe("OpenVINO Model Server config.json", () => {
  it("reads every model with its absolute base path, version policy and stateful options", async () => {
    const ovms = await readOvmsConfig(OVMS_FILE);
    assert.equal(ovms.file, OVMS_FILE);
    const [resnet, speech, vad] = ovms.models;
    assert.equal(resnet?.name, "resnet");
    assert.equal(resnet?.basePath, join(FIXTURES, "ovms", "models", "resnet"));
    assert.deepEqual(resnet?.versionPolicy, { kind: "latest", numVersions: 1 });
    assert.equal(resnet?.stateful, false);
    assert.equal(resnet?.sequence, undefined);
    assert.ok(resnet?.notes.some((n) => n.includes("'batch_size'")));

    assert.equal(speech?.basePath, "/opt/models/speech");
    assert.deepEqual(speech?.versionPolicy, { kind: "specific", versions: [1, 2] });
    assert.deepEqual(speech?.sequence, {
      maxSequenceNumber: 1000,
      idleSequenceCleanup: false,
      lowLatencyTransformation: true,
    });

    assert.equal(vad?.basePath, join(FIXTURES, "ovms", "models", "vad"));
    assert.deepEqual(
      vad?.versionPolicy,
      { kind: "latest", numVersions: 2 },
      "a policy given as a JSON string",
    );
    assert.deepEqual(vad?.sequence, {
      maxSequenceNumber: 500,
      idleSequenceCleanup: true,
      lowLatencyTransformation: false,
    });
  });

  it("turns a stateful entry into Triton-style sequence batching", async () => {
    const [, speech, vad] = (await readOvmsConfig(OVMS_FILE)).models;
    const parsed = speech?.toParsedConfig();
    assert.equal(parsed?.format, "ovms");
    assert.deepEqual(parsed?.message, {
      name: "speech",
      backend: "onnxruntime",
      version_policy: { specific: { versions: [1n, 2n] } },
      instance_group: [{ count: 1, kind: "KIND_CPU" }],
      sequence_batching: { oldest: { max_candidate_sequences: 1000 } },
      parameters: {
        state_pairs: { string_value: "<<<h_in, h_out>>> <<<c_in, c_out>>>" },
        sequence_backlog_limit: { string_value: "0" },
        sequence_idle_timeout: { string_value: "never" },
      },
    });
    // Idle cleanup: one cleaner period of the server (5 minutes by default, configurable).
    const vadBatching = (vad?.toParsedConfig().message.sequence_batching ?? {}) as Record<string, unknown>;
    assert.equal(vadBatching.max_sequence_idle_microseconds, 300_000_000n);
    // The cleaner counts from the end of a sequence's last request, and passes over one in use.
    const vadParameters = vad?.toParsedConfig().message.parameters as Record<string, unknown>;
    assert.deepEqual(vadParameters.sequence_idle_from, { string_value: "last_step" });
    const fast = vad?.toParsedConfig({ sequenceCleanerPollWaitMinutes: 1 }).message
      .sequence_batching as Record<string, unknown>;
    assert.equal(fast.max_sequence_idle_microseconds, 60_000_000n);
    const off = vad?.toParsedConfig({ sequenceCleanerPollWaitMinutes: 0 }).message.parameters as Record<
      string,
      unknown
    >;
    assert.deepEqual(off.sequence_idle_timeout, { string_value: "never" });
  });

  it("resolves like a Triton config: Silero VAD with max_sequence_number live sequences and no backlog", async () => {
    const vad = (await readOvmsConfig(OVMS_FILE)).models[2];
    const { config } = resolveModelConfig({
      parsed: vad?.toParsedConfig(),
      modelName: "vad",
      modelDir: vad?.basePath ?? "",
      modelIo: MODEL_IO.silero_vad,
    });
    assert.equal(config.maxBatchSize, 4);
    assert.deepEqual(config.versionPolicy, { kind: "latest", numVersions: 2 });
    assert.deepEqual(config.sequenceBatching?.strategy, {
      kind: "oldest",
      maxCandidateSequences: 500,
      preferredBatchSizes: [4],
      maxQueueDelayUs: 0,
      preserveOrdering: false,
    });
    assert.equal(config.sequenceBatching?.backlogLimit, 0);
    assert.equal(config.sequenceBatching?.maxSequenceIdleUs, 300_000_000);
    assert.deepEqual(config.sequenceBatching?.states[0]?.batchAxis, 1);
    assert.deepEqual(
      config.inputs.map((i) => [i.name, i.shared]),
      [
        ["input", false],
        ["sr", true],
      ],
    );
  });

  it("resolves a stateless entry from the model file alone", () => {
    const [entry] = parse([{ config: { name: "add_sub", base_path: "/m/add_sub" } }]).models;
    const { config } = resolveModelConfig({
      parsed: entry?.toParsedConfig(),
      modelName: "add_sub",
      modelDir: "/m/add_sub",
      modelIo: MODEL_IO.add_sub,
    });
    assert.equal(config.sequenceBatching, undefined);
    assert.equal(config.maxBatchSize, 4);
  });

  it("points errors found while resolving at the OVMS file", () => {
    const [entry] = parse([
      { config: { name: "lstm", base_path: "/m/lstm", stateful: true, state_pairs: "<<<h_in, nope>>>" } },
    ]).models;
    assertConfigError(
      () =>
        resolveModelConfig({
          parsed: entry?.toParsedConfig(),
          modelName: "lstm",
          modelDir: "/m/lstm",
          modelIo: {
            inputs: [tensor("x", "FP32", [-1, 3]), tensor("h_in", "FP32", [-1, 8])],
            outputs: [tensor("y", "FP32", [-1, 3])],
          },
        }),
      {
        file: FILE,
        line: 8,
        includes: "parameter 'state_pairs' names 'nope', which is not an output of model 'lstm'",
      },
    );
  });

  const errors: {
    name: string;
    models: unknown;
    line: number;
    includes: string;
    extra?: Record<string, unknown>;
  }[] = [
    {
      name: "an unknown key, naming the model",
      models: [{ config: { name: "vad", base_path: "/m", statefull: true } }],
      line: 7,
      includes: "unknown key 'statefull' in the config of model 'vad' (did you mean 'stateful'?)",
    },
    {
      name: "an unknown key beside config",
      models: [{ config: { name: "m", base_path: "/m" }, extra: 1 }],
      line: 8,
      includes: "unknown key 'extra' in a 'model_config_list' entry",
    },
    {
      name: "a mistyped value",
      models: [{ config: { name: "m", base_path: "/m", stateful: "yes" } }],
      line: 7,
      includes: `key 'stateful' of model 'm' must be true or false, got "yes"`,
    },
    {
      name: "a version policy of an unknown form",
      models: [{ config: { name: "m", base_path: "/m", model_version_policy: { newest: {} } } }],
      line: 7,
      includes: `key 'model_version_policy' of model 'm' must be {"latest": {"num_versions": N}}`,
    },
    {
      name: "a model listed twice",
      models: [{ config: { name: "m", base_path: "/a" } }, { config: { name: "m", base_path: "/b" } }],
      line: 9,
      includes: "model 'm' is listed twice",
    },
    {
      name: "an unknown top-level key",
      models: [],
      extra: { model_config: [] },
      line: 3,
      includes: "unknown key 'model_config'",
    },
  ];
  for (const c of errors) {
    it(`reports ${c.name} with file and line`, () => {
      assertConfigError(() => parse(c.models, c.extra), { file: FILE, line: c.line, includes: c.includes });
    });
  }

  // What OVMS checks model by model: the model is not loaded, the others are.
  const modelErrors: { name: string; config: Record<string, unknown>; line: number; includes: string }[] = [
    {
      name: "a stateful-only key without stateful",
      config: { name: "m", base_path: "/m", max_sequence_number: 10 },
      line: 7,
      includes: `key 'max_sequence_number' of model 'm' applies to stateful models only; set "stateful": true`,
    },
    {
      name: "idle_sequence_cleanup with stateful false",
      config: { name: "m", base_path: "/m", stateful: false, idle_sequence_cleanup: true },
      line: 8,
      includes: "key 'idle_sequence_cleanup' of model 'm' applies to stateful models only",
    },
    {
      name: "a max_sequence_number above an unsigned int, as OVMS's INVALID_MAX_SEQUENCE_NUMBER",
      config: { name: "m", base_path: "/m", stateful: true, max_sequence_number: 2 ** 32 },
      line: 8,
      includes:
        "Sequence max number parameter too high: max_sequence_number of model 'm' is above 4294967295",
    },
    {
      name: "a missing base path, no MediaPipe graph found either",
      config: { name: "m" },
      line: 4,
      includes: "model 'm' must have a non-empty 'base_path' (nor is it a MediaPipe graph: there is no ",
    },
    {
      name: "a cloud base path",
      config: { name: "m", base_path: "s3://bucket/m" },
      line: 6,
      includes: "cloud storage is not supported",
    },
  ];
  for (const c of modelErrors) {
    it(`leaves the model alone out for ${c.name}, with file and line`, () => {
      const [bad, good] = parse([
        { config: c.config },
        { config: { name: "other", base_path: "/o" } },
      ]).models;
      const invalid = bad?.invalid;
      assert.ok(invalid !== undefined, "the model is marked invalid");
      assertConfigError(
        () => {
          throw invalid;
        },
        { file: FILE, line: c.line, includes: c.includes },
      );
      assert.equal(good?.invalid, undefined);
      assert.equal(good?.toParsedConfig().message.name, "other");
    });
  }

  it("leaves pipelines out with a note, and reads the models", () => {
    const config = parse([{ config: { name: "m", base_path: "/m" } }], {
      pipeline_config_list: [{ name: "p" }],
    });
    assert.deepEqual(
      config.models.map((m) => m.name),
      ["m"],
    );
    assert.match(config.notes.join("\n"), /'pipeline_config_list' is not supported by seqserve/);
  });

  it("tells MediaPipe graphs from models as OVMS does, and leaves the graphs out with a note", () => {
    const dir = mkdtempSync(join(tmpdir(), "seqserve-ovms-graphs-"));
    try {
      const file = join(dir, "config.json");
      for (const path of ["named/graph.pbtxt", "graphs/g2/custom.pbtxt", "mesh/1/graph.pbtxt"]) {
        mkdirSync(dirname(join(dir, path)), { recursive: true });
        writeFileSync(join(dir, path), "");
      }
      const config = parseOvmsConfig(
        JSON.stringify({
          model_config_list: [
            // No base_path: the folder of its name beside the config file.
            { config: { name: "named" } },
            {
              config: { name: "g2", base_path: "graphs/g2", graph_path: "custom.pbtxt", subconfig: "s.json" },
            },
            // graph.pbtxt in the base path's version folder 1 (OVMS's model-mesh layout).
            { config: { name: "g3", base_path: "mesh" } },
            // No graph file where graph_path says: a model, whose graph_path does nothing.
            { config: { name: "m", base_path: "models/m", graph_path: "missing.pbtxt" } },
          ],
        }),
        file,
      );
      assert.deepEqual(
        config.models.map((m) => [m.name, m.invalid]),
        [["m", undefined]],
      );
      assert.deepEqual(config.notes, [
        `${file}: 'named' in 'model_config_list' is a MediaPipe graph (${join(dir, "named", "graph.pbtxt")}), which seqserve does not serve: it is left out`,
        `${file}: 'g2' in 'model_config_list' is a MediaPipe graph (${join(dir, "graphs", "g2", "custom.pbtxt")}), which seqserve does not serve: it is left out`,
        `${file}: 'g3' in 'model_config_list' is a MediaPipe graph (${join(dir, "mesh", "1", "graph.pbtxt")}), which seqserve does not serve: it is left out`,
      ]);
      assert.deepEqual(config.models[0]?.notes, [
        `'graph_path' of model 'm' has no effect: it is read as a model, there being no ${join(dir, "models", "m", "missing.pbtxt")} nor ${join(dir, "models", "m", "1", "graph.pbtxt")}`,
      ]);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("reports a JSON syntax error at its line", () => {
    assertConfigError(() => parseOvmsConfig('{\n  "model_config_list": [\n    {"config": }\n  ]\n}', FILE), {
      file: FILE,
      line: 3,
      includes: "unexpected character '}'",
    });
  });
});
