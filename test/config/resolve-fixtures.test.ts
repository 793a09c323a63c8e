import assert from "node:assert/strict";
import { join } from "node:path";
import { describe, it } from "node:test";
import {
  parseModelConfigFile,
  parseModelConfigText,
  type ResolvedModelConfig,
  resolveModelConfig,
  toTritonJson,
} from "../../src/config/index.ts";
import { FIXTURES } from "./config-assertions.ts";
import { MODEL_IO } from "./model-io-fixtures.ts";

async function resolveFixture(name: string): Promise<ResolvedModelConfig> {
  const modelDir = join(FIXTURES, name);
  const parsed = await parseModelConfigFile(join(modelDir, "config.pbtxt"));
  return resolveModelConfig({ parsed, modelName: name, modelDir, modelIo: MODEL_IO[name] });
}

function assertDeeplyFrozen(value: unknown, path = "config"): void {
  if (typeof value !== "object" || value === null) return;
  assert.ok(Object.isFrozen(value), `${path} is frozen`);
  for (const [key, item] of Object.entries(value)) assertDeeplyFrozen(item, `${path}.${key}`);
}

describe("resolving the fixture configs", () => {
  it("add_sub: a plain batching model with Triton's defaults filled in", async () => {
    const { config, tritonJson, notes } = await resolveFixture("add_sub");
    const vector = { datatype: "INT32", dims: [16] } as const;
    assert.deepEqual(config, {
      name: "add_sub",
      platform: "onnxruntime_onnx",
      backend: "onnxruntime",
      versionPolicy: { kind: "latest", numVersions: 1 },
      maxBatchSize: 8,
      inputs: [
        { name: "INPUT0", ...vector, optional: false, allowRaggedBatch: false, shared: false },
        { name: "INPUT1", ...vector, optional: false, allowRaggedBatch: false, shared: false },
      ],
      outputs: [
        { name: "OUTPUT0", ...vector },
        { name: "OUTPUT1", ...vector },
      ],
      instanceGroups: [{ name: "add_sub", count: 2, kind: "KIND_CPU" }],
      defaultModelFilename: "model.onnx",
      parameters: {},
      warmup: [],
    });
    assert.deepEqual(notes, []);
    assertDeeplyFrozen(config);
    assertDeeplyFrozen(tritonJson, "tritonJson");
  });

  it("add_sub: the Triton JSON has every default, proto names, enum names and numbers for int64", async () => {
    const { tritonJson } = await resolveFixture("add_sub");
    assert.deepEqual(tritonJson, {
      name: "add_sub",
      platform: "onnxruntime_onnx",
      backend: "onnxruntime",
      runtime: "",
      version_policy: { latest: { num_versions: 1 } },
      max_batch_size: 8,
      input: ["INPUT0", "INPUT1"].map((name) => ({
        name,
        data_type: "TYPE_INT32",
        format: "FORMAT_NONE",
        dims: [16],
        is_shape_tensor: false,
        allow_ragged_batch: false,
        optional: false,
        is_non_linear_format_io: false,
      })),
      output: ["OUTPUT0", "OUTPUT1"].map((name) => ({
        name,
        data_type: "TYPE_INT32",
        dims: [16],
        label_filename: "",
        is_shape_tensor: false,
        is_non_linear_format_io: false,
      })),
      batch_input: [],
      batch_output: [],
      optimization: {
        priority: "PRIORITY_DEFAULT",
        input_pinned_memory: { enable: true },
        output_pinned_memory: { enable: true },
        gather_kernel_buffer_threshold: 0,
        eager_batching: false,
      },
      instance_group: [
        {
          name: "add_sub",
          kind: "KIND_CPU",
          count: 2,
          gpus: [],
          secondary_devices: [],
          profile: [],
          passive: false,
          host_policy: "",
        },
      ],
      default_model_filename: "model.onnx",
      cc_model_filenames: {},
      metric_tags: {},
      parameters: {},
      model_warmup: [],
    });
  });

  it("writes int64 fields as strings in protobuf's JSON mapping", async () => {
    const { completed } = await resolveFixture("sequence_direct");
    const json = toTritonJson(completed, { int64: "string" }) as {
      input: { dims: unknown[] }[];
      max_batch_size: unknown;
      sequence_batching: { max_sequence_idle_microseconds: unknown; direct: Record<string, unknown> };
    };
    assert.deepEqual(json.input[0]?.dims, ["1"]);
    assert.equal(json.max_batch_size, 4, "int32 stays a number");
    assert.equal(json.sequence_batching.max_sequence_idle_microseconds, "5000000");
    assert.deepEqual(json.sequence_batching.direct, {
      max_queue_delay_microseconds: "100",
      minimum_slot_utilization: 0.5,
    });
  });

  it("image_classifier: dynamic batching, reshape, labels, every version, two instances", async () => {
    const { config, tritonJson } = await resolveFixture("image_classifier");
    assert.deepEqual(config.versionPolicy, { kind: "all" });
    assert.equal(config.maxBatchSize, 16);
    assert.deepEqual(config.inputs, [
      {
        name: "data_0",
        datatype: "FP32",
        dims: [3, 224, 224],
        optional: false,
        allowRaggedBatch: false,
        shared: false,
      },
    ]);
    assert.deepEqual(config.outputs, [
      {
        name: "fc6_1",
        datatype: "FP32",
        dims: [1000],
        reshape: [1, 1000, 1, 1],
        labelFilename: "densenet_labels.txt",
      },
    ]);
    assert.deepEqual(config.dynamicBatching, {
      preferredBatchSizes: [4, 8],
      maxQueueDelayUs: 100,
      preserveOrdering: true,
      priorityLevels: 0,
      defaultPriorityLevel: 0,
      defaultQueuePolicy: { maxQueueSize: 64 },
      priorityQueuePolicies: new Map(),
    });
    assert.deepEqual(config.instanceGroups, [{ name: "image_classifier_0", count: 2, kind: "KIND_CPU" }]);
    assert.equal(config.sequenceBatching, undefined);
    const json = tritonJson as { input: { format: string }[]; dynamic_batching: Record<string, unknown> };
    assert.equal(json.input[0]?.format, "FORMAT_NCHW");
    assert.deepEqual(json.dynamic_batching, {
      preferred_batch_size: [4, 8],
      max_queue_delay_microseconds: 100,
      preserve_ordering: true,
      priority_levels: 0,
      default_priority_level: 0,
      default_queue_policy: {
        timeout_action: "REJECT",
        default_timeout_microseconds: 0,
        allow_timeout_override: false,
        max_queue_size: 64,
      },
      priority_queue_policy: {},
    });
  });

  it("sequence_direct: every control kind in every encoding, Direct strategy", async () => {
    const { config } = await resolveFixture("sequence_direct");
    assert.deepEqual(config.sequenceBatching, {
      strategy: { kind: "direct", maxQueueDelayUs: 100, minimumSlotUtilization: 0.5 },
      maxSequenceIdleUs: 5_000_000,
      controlInputs: [
        { name: "START", kind: "START", datatype: "INT32", falseTrue: [0, 1], fed: true },
        { name: "END", kind: "END", datatype: "FP32", falseTrue: [0, 1], fed: true },
        { name: "READY", kind: "READY", datatype: "BOOL", falseTrue: [0, 1], fed: true },
        { name: "CORRID", kind: "CORRID", datatype: "UINT64", fed: true },
      ],
      states: [],
      backlogLimit: 1024,
      stateMaxBytes: 67108864,
      storeStatesAsFp16: false,
      inferEndRequests: true,
      maxSequenceUseRatio: undefined,
      padToMaxBatch: false,
      // seqserve's own slabs: Direct has max(1, max_batch_size) slots per instance (two, by default).
      stateBuffer: { initialRows: 8, subsequentRows: 8, allocThreshold: 0, deallocThreshold: 256 },
      logging: { resets: false, batches: false, metricsIntervalSecs: 0, detailedMetrics: false },
    });
    assert.deepEqual(config.instanceGroups, [{ name: "sequence_direct_0", count: 2, kind: "KIND_CPU" }]);
  });

  it("sequence_oldest: Oldest strategy, string correlation ids, the default idle time", async () => {
    const { config, tritonJson } = await resolveFixture("sequence_oldest");
    const batching = config.sequenceBatching;
    assert.deepEqual(batching?.strategy, {
      kind: "oldest",
      maxCandidateSequences: 32,
      preferredBatchSizes: [4, 8],
      maxQueueDelayUs: 2000,
      preserveOrdering: true,
    });
    assert.deepEqual(batching?.controlInputs[1], {
      name: "CORRID",
      kind: "CORRID",
      datatype: "BYTES",
      fed: true,
    });
    assert.equal(batching?.maxSequenceIdleUs, 1_000_000);
    const json = tritonJson as { sequence_batching: { max_sequence_idle_microseconds: number } };
    assert.equal(json.sequence_batching.max_sequence_idle_microseconds, 1_000_000);
  });

  it("implicit_state: Triton state with a data file and zeros, batched on axis 0", async () => {
    const { config } = await resolveFixture("implicit_state");
    assert.deepEqual(config.sequenceBatching?.states, [
      {
        inputName: "ACC_IN",
        outputName: "ACC_OUT",
        datatype: "FP32",
        dims: [-1, 4],
        batchAxis: 0,
        initialState: {
          kind: "file",
          datatype: "FP32",
          dims: [1, 4],
          path: join(FIXTURES, "implicit_state", "initial_state", "acc_init.bin"),
        },
      },
      {
        inputName: "CACHE_IN",
        outputName: "CACHE_OUT",
        datatype: "INT32",
        dims: [-1, -1, 2],
        batchAxis: 0,
        initialState: { kind: "zero", datatype: "INT32", dims: [1, 3, 2] },
      },
    ]);
    assert.deepEqual(
      config.outputs.map((o) => o.name),
      ["OUTPUT", "ACC_OUT"],
      "a state output listed in 'output' is also returned to clients",
    );
  });

  it("stateful_accumulate: the ONNX stateful backend's parameters", async () => {
    const { config, notes } = await resolveFixture("stateful_accumulate");
    const batching = config.sequenceBatching;
    assert.deepEqual(batching?.states, [
      {
        inputName: "Accumulate_In",
        outputName: "Accumulate_Out",
        datatype: "FP32",
        dims: [4, -1, 5],
        batchAxis: 1,
      },
    ]);
    assert.equal(batching?.storeStatesAsFp16, true);
    assert.equal(batching?.inferEndRequests, false);
    assert.equal(batching?.maxSequenceIdleUs, 100_000_000);
    assert.deepEqual(batching?.strategy, {
      kind: "oldest",
      maxCandidateSequences: 1280,
      preferredBatchSizes: [16],
      maxQueueDelayUs: 2000,
      preserveOrdering: false,
    });
    assert.deepEqual(
      batching?.controlInputs.map((c) => [c.name, c.kind]),
      [
        ["ResetSequence", "START"],
        ["EndSequence", "END"],
      ],
    );
    assert.equal(config.parameters.max_candidate_sequence_use_ratio, "0.9");
    assert.deepEqual(config.instanceGroups, [{ name: "stateful_accumulate_0", count: 2, kind: "KIND_CPU" }]);
    assert.ok(notes.some((n) => n.includes("KIND_GPU")));
  });

  it("silero_vad: state batched on axis 1, `sr` shared by the batch", async () => {
    const { config } = await resolveFixture("silero_vad");
    assert.deepEqual(config.inputs, [
      {
        name: "input",
        datatype: "FP32",
        dims: [-1],
        optional: false,
        allowRaggedBatch: false,
        shared: false,
      },
      {
        name: "sr",
        datatype: "INT64",
        dims: [1],
        reshape: [],
        optional: false,
        allowRaggedBatch: false,
        shared: true,
      },
    ]);
    assert.deepEqual(config.sequenceBatching?.states, [
      { inputName: "state", outputName: "stateN", datatype: "FP32", dims: [2, -1, 128], batchAxis: 1 },
    ]);
    assert.equal(config.sequenceBatching?.backlogLimit, 256);
    assert.equal(config.sequenceBatching?.maxSequenceIdleUs, 30_000_000);
  });

  it("full_options: every section round-trips", async () => {
    const { config, tritonJson, notes } = await resolveFixture("full_options");
    assert.deepEqual(config.versionPolicy, { kind: "specific", versions: [1, 3] });
    assert.equal(config.defaultModelFilename, "classifier.onnx");
    assert.deepEqual(config.inputs, [
      {
        name: "TOKENS",
        datatype: "INT64",
        dims: [-1],
        optional: false,
        allowRaggedBatch: false,
        shared: false,
      },
      {
        name: "MASK",
        datatype: "INT64",
        dims: [-1],
        optional: false,
        allowRaggedBatch: false,
        shared: false,
      },
      {
        name: "SCALE",
        datatype: "FP16",
        dims: [2, 2],
        reshape: [4],
        optional: false,
        allowRaggedBatch: false,
        shared: true,
      },
    ]);
    assert.deepEqual(config.outputs, [
      { name: "LOGITS", datatype: "FP32", dims: [4], labelFilename: "labels.txt" },
    ]);
    assert.deepEqual(config.dynamicBatching, {
      preferredBatchSizes: [8, 16, 32],
      maxQueueDelayUs: 250,
      preserveOrdering: false,
      priorityLevels: 0,
      defaultPriorityLevel: 0,
      defaultQueuePolicy: { maxQueueSize: 100 },
      priorityQueuePolicies: new Map(),
    });
    assert.deepEqual(config.instanceGroups, [
      { name: "cpu_pool", count: 3, kind: "KIND_CPU" },
      { name: "full_options_1", count: 1, kind: "KIND_CPU" },
    ]);
    assert.deepEqual(config.parameters, { intra_op_thread_count: "1", shared_inputs: "SCALE" });

    const json = tritonJson as Record<string, unknown> & {
      optimization: Record<string, unknown>;
      instance_group: Record<string, unknown>[];
      model_warmup: Record<string, unknown>[];
    };
    assert.deepEqual(json.version_policy, { specific: { versions: [1, 3] } });
    assert.deepEqual(json.optimization, {
      graph: { level: 1 },
      priority: "PRIORITY_MAX",
      execution_accelerators: {
        gpu_execution_accelerator: [],
        cpu_execution_accelerator: [{ name: "openvino", parameters: {} }],
      },
      input_pinned_memory: { enable: false },
      output_pinned_memory: { enable: true },
      gather_kernel_buffer_threshold: 0,
      eager_batching: false,
    });
    assert.deepEqual(json.instance_group[0], {
      name: "cpu_pool",
      kind: "KIND_CPU",
      count: 3,
      rate_limiter: {
        resources: [
          { name: "R1", global: false, count: 4 },
          { name: "R2", global: true, count: 2 },
        ],
        priority: 2,
      },
      gpus: [],
      secondary_devices: [],
      profile: [],
      passive: false,
      host_policy: "numa0",
    });
    assert.deepEqual(json.metric_tags, { team: "search" });
    assert.deepEqual(json.model_warmup, [
      {
        name: "zeros",
        batch_size: 1,
        inputs: {
          TOKENS: { data_type: "TYPE_INT64", dims: [8], zero_data: true },
          MASK: { data_type: "TYPE_INT64", dims: [8], random_data: true },
        },
        count: 2,
      },
    ]);
    // An ONNX model without sequence batching runs its samples: nothing to note.
    assert.ok(!notes.some((n) => n.includes("model_warmup")));
    assert.deepEqual(config.warmup, [
      {
        name: "zeros",
        batchSize: 1,
        count: 2,
        inputs: [
          { name: "TOKENS", datatype: "INT64", dims: [8], data: { kind: "zero" } },
          { name: "MASK", datatype: "INT64", dims: [8], data: { kind: "random" } },
        ],
      },
    ]);
    assert.ok(notes.some((n) => n.includes("'openvino'")));
  });

  it("gives Oldest without max_candidate_sequences a batch's rows of candidates, as Triton's scheduler", () => {
    // Triton's own QA configs write `oldest { }` and `oldest { max_queue_delay_microseconds: 987 }`.
    const resolve = (maxBatchSize: number, oldest: string) =>
      resolveModelConfig({
        parsed: parseModelConfigText(
          `max_batch_size: ${maxBatchSize}
           input { name: "x" data_type: TYPE_FP32 dims: [1] } output { name: "y" data_type: TYPE_FP32 dims: [1] }
           sequence_batching { oldest { ${oldest} } }`,
          { file: "m/config.pbtxt" },
        ),
        modelName: "m",
        modelDir: "m",
      }).config.sequenceBatching?.strategy;
    const candidates = (strategy: ReturnType<typeof resolve>) =>
      strategy?.kind === "oldest" ? strategy.maxCandidateSequences : undefined;
    assert.equal(candidates(resolve(8, "")), 8);
    assert.equal(candidates(resolve(8, "max_queue_delay_microseconds: 987")), 8);
    assert.equal(candidates(resolve(0, "max_candidate_sequences: 0")), 1);
    assert.equal(candidates(resolve(8, "max_candidate_sequences: 3")), 3);
  });

  it("reports the effective idle timeout, including seqserve's 'never'", async () => {
    const { parseModelConfigText } = await import("../../src/config/index.ts");
    const resolve = (idle: string) =>
      resolveModelConfig({
        parsed: parseModelConfigText(
          `input { name: "x" data_type: TYPE_FP32 dims: [1] } output { name: "y" data_type: TYPE_FP32 dims: [1] }
           sequence_batching { max_sequence_idle_microseconds: 7 }
           parameters { key: "sequence_idle_timeout" value { string_value: "${idle}" } }`,
          { file: "m/config.pbtxt" },
        ),
        modelName: "m",
        modelDir: "m",
      });
    const never = resolve("never");
    assert.equal(never.config.sequenceBatching?.maxSequenceIdleUs, undefined);
    assert.equal(
      (never.tritonJson.sequence_batching as Record<string, unknown>).max_sequence_idle_microseconds,
      0,
    );
    const minute = resolve("60000000");
    assert.equal(minute.config.sequenceBatching?.maxSequenceIdleUs, 60_000_000);
    assert.equal(
      (minute.tritonJson.sequence_batching as Record<string, unknown>).max_sequence_idle_microseconds,
      60_000_000,
    );
  });
});

describe("shared inputs", () => {
  it("recognises an input the model gives no batch dimension (a fixed first dimension)", async () => {
    const { parseModelConfigText } = await import("../../src/config/index.ts");
    const { tensor } = await import("./model-io-fixtures.ts");
    const { config } = resolveModelConfig({
      parsed: parseModelConfigText(
        `max_batch_size: 8
         input { name: "audio" data_type: TYPE_FP32 dims: [ -1 ] }
         input { name: "lang" data_type: TYPE_INT32 dims: [ 2 ] }
         output { name: "y" data_type: TYPE_FP32 dims: [ 1 ] }`,
        { file: "m/config.pbtxt" },
      ),
      modelName: "m",
      modelDir: "m",
      modelIo: {
        inputs: [tensor("audio", "FP32", [-1, -1]), tensor("lang", "INT32", [2])],
        outputs: [tensor("y", "FP32", [-1, 1])],
      },
    });
    assert.deepEqual(
      config.inputs.map((i) => [i.name, i.shared]),
      [
        ["audio", false],
        ["lang", true],
      ],
    );
  });
});

describe("dynamic batching queue policies", () => {
  const resolveText = (batching: string) =>
    resolveModelConfig({
      parsed: parseModelConfigText(
        `max_batch_size: 8\ninput { name: "x" data_type: TYPE_FP32 dims: [ 4 ] }\noutput { name: "y" data_type: TYPE_FP32 dims: [ 4 ] }\ndynamic_batching {\n${batching}\n}`,
        { file: "models/m/config.pbtxt" },
      ),
      modelName: "m",
      modelDir: "models/m",
    });

  it("a warmup input's data kind is the member set, whatever its value (zero_data: false is zeros), as Triton reads the oneof", () => {
    const { config } = resolveModelConfig({
      parsed: parseModelConfigText(
        `max_batch_size: 8\ninput { name: "x" data_type: TYPE_FP32 dims: [ 4 ] }\noutput { name: "y" data_type: TYPE_FP32 dims: [ 4 ] }\nmodel_warmup [ { name: "w" batch_size: 1 inputs { key: "x" value: { data_type: TYPE_FP32 dims: [ 4 ] zero_data: false } } } ]`,
        { file: "models/m/config.pbtxt" },
      ),
      modelName: "m",
      modelDir: "models/m",
    });
    assert.deepEqual(
      config.warmup.map((sample) => sample.inputs.map((input) => input.data.kind)),
      [["zero"]],
    );
  });

  it("the default policy's timeout, override and action are applied", () => {
    const { config, notes } = resolveText(
      "default_queue_policy { timeout_action: DELAY default_timeout_microseconds: 5000 allow_timeout_override: true max_queue_size: 3 }",
    );
    assert.deepEqual(config.dynamicBatching, {
      preferredBatchSizes: [8],
      maxQueueDelayUs: 0,
      preserveOrdering: false,
      priorityLevels: 0,
      defaultPriorityLevel: 0,
      defaultQueuePolicy: {
        maxQueueSize: 3,
        timeout: { defaultUs: 5000, allowOverride: true, action: "DELAY" },
      },
      priorityQueuePolicies: new Map(),
    });
    assert.deepEqual(notes, []);
  });

  it("no default timeout: no queue timeout, whatever the override says (as Triton)", () => {
    const { config } = resolveText("default_queue_policy { allow_timeout_override: true }");
    assert.equal(config.dynamicBatching?.defaultQueuePolicy.timeout, undefined);
  });

  it("model_metrics bucket overrides are read and said not to apply", () => {
    const { notes } = resolveModelConfig({
      parsed: parseModelConfigText(
        `max_batch_size: 8\ninput { name: "x" data_type: TYPE_FP32 dims: [ 4 ] }\noutput { name: "y" data_type: TYPE_FP32 dims: [ 4 ] }\nmodel_metrics { metric_control: [ { metric_identifier: { family: "nv_inference_first_response_histogram_ms" } histogram_options: { buckets: [ 1, 2, 4 ] } } ] }`,
        { file: "models/m/config.pbtxt" },
      ),
      modelName: "m",
      modelDir: "models/m",
    });
    assert.deepEqual(notes, [
      "model_metrics of model 'm' are not applied: the histograms keep their buckets",
    ]);
  });

  it("priority levels are read with each level's queue policy, the default one for the others", () => {
    const { config, notes } = resolveText(`
  priority_levels: 2
  default_priority_level: 2
  default_queue_policy { default_timeout_microseconds: 100 max_queue_size: 9 }
  priority_queue_policy { key: 2 value { default_timeout_microseconds: 7000 max_queue_size: 4 } }`);
    assert.equal(config.dynamicBatching?.priorityLevels, 2);
    assert.equal(config.dynamicBatching?.defaultPriorityLevel, 2);
    assert.deepEqual(config.dynamicBatching?.defaultQueuePolicy, {
      maxQueueSize: 9,
      timeout: { defaultUs: 100, allowOverride: false, action: "REJECT" },
    });
    assert.deepEqual(
      config.dynamicBatching?.priorityQueuePolicies,
      new Map([
        [2, { maxQueueSize: 4, timeout: { defaultUs: 7000, allowOverride: false, action: "REJECT" } }],
      ]),
    );
    assert.deepEqual(notes, []);
  });
});
