import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { parseCommandLine, UsageError } from "../../src/cli/options.ts";
import { readBackendConfig } from "../../src/config/backend-config.ts";
import { parseModelConfigText, readLoadSettings, resolveModelConfig } from "../../src/config/index.ts";
import { statePairsOfGraphDescription } from "../../src/config/resolve/graph-description-pairs.ts";
import type { ModelIo } from "../../src/core/model-io.ts";
import { assertConfigError } from "./config-assertions.ts";
import { tensor } from "./model-io-fixtures.ts";

// Configs written for Triton's ONNX stateful backend, resolved against what their model
// declares: backend "stateful", the model file from onnx_file_name, state_pairs split by
// spaces or commas, the batch on the dimension marked -1, the controls the backend
// consumes itself, its defaults; and the launch flags --backend-config and
// --model-load-thread-count.

const FILE = "models/acc/config.pbtxt";

/** The mixed int32 + fp16 example's tensors: [seq, batch, 7] in and out, [batch, 7] state, a bool reset. */
const MIXED_IO: ModelIo = {
  inputs: [
    tensor("Input_int32", "INT32", [-1, -1, 7]),
    tensor("Accumulate_In_int32", "INT32", [-1, 7]),
    tensor("Input_fp16", "FP16", [-1, -1, 7]),
    tensor("Accumulate_In_fp16", "FP16", [-1, 7]),
    tensor("ResetSequence", "BOOL", [-1, 1]),
  ],
  outputs: [
    tensor("Output_int32", "INT32", [-1, -1, 7]),
    tensor("Accumulate_Out_int32", "INT32", [-1, 7]),
    tensor("Output_fp16", "FP16", [-1, -1, 7]),
    tensor("Accumulate_Out_fp16", "FP16", [-1, 7]),
  ],
};

/** `pairs` null: no state_pairs parameter. */
function mixedConfig(options: { pairs?: string | null; extra?: string; dims?: string } = {}): string {
  const dims = options.dims ?? "4, -1, 7";
  const pairs =
    options.pairs ??
    "<<<Accumulate_In_int32, Accumulate_Out_int32>>>,<<<Accumulate_In_fp16, Accumulate_Out_fp16>>>";
  return `name: "acc"
backend: "stateful"
max_batch_size: 16
sequence_batching {
  oldest { max_candidate_sequences: 100 max_queue_delay_microseconds: 2000 }
  control_input [
    { name: "ResetSequence" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] },
    { name: "EndSequence" control [ { kind: CONTROL_SEQUENCE_END int32_false_true: [ 0, 1 ] } ] },
    { name: "CORRID" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_STRING } ] }
  ]
}
input [
  { name: "Input_int32" data_type: TYPE_INT32 dims: [ ${dims} ] },
  { name: "Input_fp16" data_type: TYPE_FP16 dims: [ ${dims} ] }
]
output [
  { name: "Output_int32" data_type: TYPE_INT32 dims: [ ${dims} ] },
  { name: "Output_fp16" data_type: TYPE_FP16 dims: [ ${dims} ] }
]
parameters [
  { key: "onnx_file_name" value: { string_value: "mixed.onnx" } }${
    options.pairs === null ? "" : `,\n  { key: "state_pairs" value: { string_value: "${pairs}" } }`
  }
]
instance_group [ { count: 2 kind: KIND_GPU gpus: [ 0 ] } ]
${options.extra ?? ""}`;
}

function resolve(text: string, modelIo: ModelIo | undefined = MIXED_IO) {
  return resolveModelConfig({
    parsed: parseModelConfigText(text, { file: FILE }),
    modelName: "acc",
    modelDir: "models/acc",
    modelIo,
  });
}

describe("a config for backend 'stateful'", () => {
  it("reads the model file name from onnx_file_name before the model is opened", () => {
    const settings = readLoadSettings(
      parseModelConfigText(mixedConfig(), { file: FILE }),
      "acc",
      "models/acc",
    );
    assert.equal(settings.backend, "stateful");
    assert.equal(settings.defaultModelFilename, "mixed.onnx");
    assert.equal(settings.instanceCount, 2);
  });

  it("batches inputs, outputs and states along the dimension marked -1", () => {
    const { config } = resolve(mixedConfig());
    assert.equal(config.backend, "stateful");
    assert.equal(config.platform, "");
    assert.deepEqual(
      config.inputs.map((i) => [i.name, i.markedBatchAxis, i.shared]),
      [
        ["Input_int32", 1, false],
        ["Input_fp16", 1, false],
      ],
    );
    assert.deepEqual(
      config.outputs.map((o) => [o.name, o.markedBatchAxis]),
      [
        ["Output_int32", 1],
        ["Output_fp16", 1],
      ],
    );
    assert.deepEqual(
      config.sequenceBatching?.states.map((s) => [s.inputName, s.datatype, s.batchAxis]),
      [
        ["Accumulate_In_int32", "INT32", 0],
        ["Accumulate_In_fp16", "FP16", 0],
      ],
    );
  });

  it("takes state_pairs separated by spaces, commas, or both", () => {
    for (const separator of [" ", ",", ", ", "  ,  "]) {
      const pairs = `<<<Accumulate_In_int32, Accumulate_Out_int32>>>${separator}<<<Accumulate_In_fp16,Accumulate_Out_fp16>>>`;
      const { config } = resolve(mixedConfig({ pairs }));
      assert.deepEqual(
        config.sequenceBatching?.states.map((s) => s.outputName),
        ["Accumulate_Out_int32", "Accumulate_Out_fp16"],
        separator,
      );
    }
  });

  it("feeds START to the model's boolean reset input and keeps END and CORRID to itself", () => {
    const { config } = resolve(mixedConfig());
    assert.deepEqual(
      config.sequenceBatching?.controlInputs.map((c) => [c.name, c.kind, c.datatype, c.fed]),
      [
        ["ResetSequence", "START", "BOOL", true],
        ["EndSequence", "END", "INT32", false],
        ["CORRID", "CORRID", "BYTES", false],
      ],
    );
  });

  it("feeds START to the model's reset input whatever its case, under the model's spelling, as the backend", () => {
    const lower: ModelIo = {
      ...MIXED_IO,
      inputs: MIXED_IO.inputs.map((t) =>
        t.name === "ResetSequence" ? tensor("resetsequence", "BOOL", [-1, 1]) : t,
      ),
    };
    const start = (text: string) => resolve(text, lower).config.sequenceBatching?.controlInputs[0];
    assert.deepEqual(start(mixedConfig()), {
      name: "resetsequence",
      kind: "START",
      datatype: "BOOL",
      fed: true,
      falseTrue: [0, 1],
    });
    // Completed from the model file, the inputs leave it to the control.
    const unlisted = mixedConfig().replace(/\ninput \[[\s\S]*?\n\]\noutput \[[\s\S]*?\n\]\n/, "\n");
    assert.ok(!unlisted.includes("Input_int32"), unlisted);
    const completed = resolve(unlisted, lower).config;
    assert.deepEqual(
      completed.inputs.map((i) => i.name),
      ["Input_int32", "Input_fp16"],
    );
    assert.equal(completed.sequenceBatching?.controlInputs[0]?.name, "resetsequence");
    // Other backends match a control's name exactly, as Triton does.
    const plain = `name: "acc"
max_batch_size: 16
sequence_batching {
  control_input [ { name: "ResetSequence" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] } ]
}
input [ { name: "x" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "y" data_type: TYPE_FP32 dims: [ 4 ] } ]`;
    const plainIo: ModelIo = {
      inputs: [tensor("x", "FP32", [-1, 4]), tensor("resetsequence", "INT32", [-1, 1])],
      outputs: [tensor("y", "FP32", [-1, 4])],
    };
    assertConfigError(() => resolve(plain, plainIo), {
      file: FILE,
      includes:
        "configuration specified sequence control 'ResetSequence', but model 'acc' does not provide that input",
    });
  });

  it("has the backend's defaults: 90 % of the slots usable, all state reserved at load, resets logged", () => {
    const batching = resolve(mixedConfig()).config.sequenceBatching!;
    assert.equal(batching.maxSequenceUseRatio, 0.9);
    // max_candidate_sequences 100 per instance, two instances: state for the 180 usable at once.
    assert.deepEqual(batching.stateBuffer, {
      initialRows: 180,
      subsequentRows: 16,
      allocThreshold: 16,
      deallocThreshold: 200,
    });
    assert.deepEqual(batching.logging, {
      resets: true,
      batches: false,
      metricsIntervalSecs: 0,
      detailedMetrics: false,
    });
    assert.equal(batching.padToMaxBatch, false);
  });

  it("lowers initial_buffer_size to the sequences it may have at once, and checks the lowered size, as the backend does", () => {
    // The backend's example buffer parameters.
    const lazy = `parameters [
  { key: "initial_buffer_size" value: { string_value: "512" } },
  { key: "subsequent_buffer_size" value: { string_value: "100" } },
  { key: "buffer_alloc_threshold" value: { string_value: "32" } },
  { key: "buffer_dealloc_threshold" value: { string_value: "200" } }
]`;
    const withCandidates = (candidates: number) =>
      mixedConfig({ extra: lazy }).replace(
        "max_candidate_sequences: 100",
        `max_candidate_sequences: ${candidates}`,
      );
    // 100 per instance, two instances: 180 at once with the ratio of 0.9.
    const { config, notes } = resolve(withCandidates(100));
    assert.deepEqual(config.sequenceBatching?.stateBuffer, {
      initialRows: 180,
      subsequentRows: 100,
      allocThreshold: 32,
      deallocThreshold: 200,
    });
    assert.ok(
      notes.includes(
        "initial_buffer_size 512 is lowered to the 180 sequences max_candidate_sequence_use_ratio 0.9 of the 200 sequence slots of model 'acc' allows",
      ),
      notes.join("\n"),
    );
    // Lowered to 14, less than max_batch_size 16.
    assertConfigError(() => resolve(withCandidates(8)), {
      file: FILE,
      includes:
        "Initial buffer size must be larger than or equal to the max batch size: initial_buffer_size 512 (lowered to the 14 sequences",
    });
    // Lowered to 27, less than buffer_alloc_threshold 32.
    assertConfigError(() => resolve(withCandidates(15)), {
      file: FILE,
      includes:
        "Initial buffer size cannot be smaller than allocation threshold: initial_buffer_size 512 (lowered to the 27 sequences",
    });
  });

  it("has the slots of count instances on each GPU an instance group lists", () => {
    const config = mixedConfig().replace("gpus: [ 0 ]", "gpus: [ 0, 1 ]");
    assert.equal(
      readLoadSettings(parseModelConfigText(config, { file: FILE }), "acc", "models/acc").instanceCount,
      4,
    );
    const batching = resolve(config).config.sequenceBatching!;
    // max_candidate_sequences 100 on each of four instances: 400 slots, 360 usable at once.
    assert.equal(batching.stateBuffer.initialRows, 360);
    assert.equal(batching.stateBuffer.deallocThreshold, 400);
  });

  it("notes each parameter it cannot use here instead of failing", () => {
    const extra = `parameters [
  { key: "ort_ep" value: { string_value: "trt" } },
  { key: "compute_precision" value: { string_value: "fp16" } },
  { key: "enable_cuda_graph" value: { string_value: "1" } },
  { key: "store_states_as_fp16" value: { string_value: "1" } }
]`;
    const { notes, config } = resolve(mixedConfig({ extra }));
    assert.ok(notes.some((n) => n.includes("parameter 'ort_ep' of model 'acc' has no effect here")));
    assert.ok(
      notes.some((n) => n.includes("parameter 'compute_precision' of model 'acc' has no effect here")),
    );
    assert.ok(
      notes.some((n) => n.includes("parameter 'enable_cuda_graph' of model 'acc' has no effect here")),
    );
    assert.ok(notes.some((n) => n.includes("KIND_GPU")));
    // FP16 storage applies to FP32 states only: the model has none, which is worth a note, not an error.
    assert.equal(config.sequenceBatching?.storeStatesAsFp16, true);
    assert.ok(notes.some((n) => n.includes("'store_states_as_fp16' of model 'acc' has no effect")));
  });

  it("refuses what the backend refuses, saying where", () => {
    assertConfigError(() => resolve(mixedConfig({ dims: "-1, -1, 7" })), {
      file: FILE,
      line: 13,
      includes: "backend 'stateful' batches along the one dimension marked -1",
    });
    assertConfigError(() => resolve(mixedConfig().replace('"mixed.onnx"', '"../other.onnx"'), undefined), {
      file: FILE,
      includes: "parameter 'onnx_file_name' '../other.onnx' must name a file inside the version directory",
    });
    assertConfigError(() => resolve(`platform: "onnxruntime_onnx"\n${mixedConfig()}`), {
      file: FILE,
      includes: "sets both platform 'onnxruntime_onnx' and backend 'stateful'",
    });
  });
});

describe("state pairs in the ONNX graph's description, where the config names none", () => {
  // The backend's StateTensor::InitTensorNames: a line naming InputState and OutputState
  // (then PastValueInput and PastValueOutput) lists "<<<first, second>>>" pairs after the
  // first word, the input being on the side of the word that comes first.
  it("reads the pairs as the backend reads them", () => {
    const cases: [string, [string, string][]][] = [
      [
        "InputState OutputState <<<a, b>>> <<<c,d>>>",
        [
          ["a", "b"],
          ["c", "d"],
        ],
      ],
      ["OutputState / InputState: <<<b, a>>>", [["a", "b"]]],
      ["states: InputState <<<a:-1x7, b:-1x7>>> OutputState", [["a", "b"]]],
      ["<<<x, y>>> before the words: InputState OutputState <<<a, b>>>", [["a", "b"]]],
      [
        "PastValueInput PastValueOutput <<<p, q>>>\nInputState OutputState <<<a, b>>>",
        [
          ["a", "b"],
          ["p", "q"],
        ],
      ],
      ["InputState <<<a, b>>>\nOutputState", []],
      ["a model with no state in its description", []],
      ["", []],
    ];
    for (const [description, pairs] of cases) {
      assert.deepEqual(
        statePairsOfGraphDescription(description).map((p) => [p.input, p.output]),
        pairs,
        description,
      );
    }
  });

  it("takes them for a config without state_pairs, and says so", () => {
    const graphDescription =
      "Accumulators.\nOutputState InputState <<<Accumulate_Out_int32:-1x7, Accumulate_In_int32:-1x7>>>\n" +
      "PastValueInput PastValueOutput <<<Accumulate_In_fp16, Accumulate_Out_fp16>>>";
    const { config, notes } = resolve(mixedConfig({ pairs: null }), { ...MIXED_IO, graphDescription });
    assert.deepEqual(
      config.sequenceBatching?.states.map((s) => [s.inputName, s.outputName, s.datatype, s.batchAxis]),
      [
        ["Accumulate_In_int32", "Accumulate_Out_int32", "INT32", 0],
        ["Accumulate_In_fp16", "Accumulate_Out_fp16", "FP16", 0],
      ],
    );
    assert.ok(
      notes.some((n) =>
        n.includes(
          "its state pairs <<<Accumulate_In_int32, Accumulate_Out_int32>>> <<<Accumulate_In_fp16, Accumulate_Out_fp16>>> are read from the ONNX graph's description",
        ),
      ),
      notes.join("\n"),
    );
  });

  it("takes them for an empty state_pairs too, as the backend does", () => {
    // In the description's order, not the default config's.
    const graphDescription =
      "InputState OutputState <<<Accumulate_In_fp16, Accumulate_Out_fp16>>> <<<Accumulate_In_int32, Accumulate_Out_int32>>>";
    const { config } = resolve(mixedConfig({ pairs: "" }), { ...MIXED_IO, graphDescription });
    assert.deepEqual(
      config.sequenceBatching?.states.map((s) => s.inputName),
      ["Accumulate_In_fp16", "Accumulate_In_int32"],
    );
  });

  it("lets state_pairs, when the config has it, take precedence, as the backend does", () => {
    const graphDescription = "InputState OutputState <<<Accumulate_In_fp16, Accumulate_Out_fp16>>>";
    // The fp16 state is then a model input like any other, which this config does not list.
    assertConfigError(
      () =>
        resolve(mixedConfig({ pairs: "<<<Accumulate_In_int32, Accumulate_Out_int32>>>" }), {
          ...MIXED_IO,
          graphDescription,
        }),
      { file: FILE, includes: "input 'Accumulate_In_fp16' of model 'acc' is given no value" },
    );
  });

  it("refuses a model with no state anywhere, and names a pair the model does not have, as from the description", () => {
    assertConfigError(
      () => resolve(mixedConfig({ pairs: null }), { ...MIXED_IO, graphDescription: "no state here" }),
      {
        file: FILE,
        includes: [
          "backend 'stateful' found no state tensors for model 'acc'",
          "parameter 'state_pairs' (\"<<<state_input, state_output>>> ...\") or in the ONNX graph's description",
        ],
      },
    );
    assertConfigError(
      () =>
        resolve(mixedConfig({ pairs: null }), {
          ...MIXED_IO,
          graphDescription: "InputState OutputState <<<h_in, Accumulate_Out_int32>>>",
        }),
      {
        file: FILE,
        includes: "the ONNX graph's description names 'h_in', which is not an input of model 'acc'",
      },
    );
  });
});

describe("--backend-config", () => {
  it("honours default-max-batch-size (for every backend or onnxruntime) and stateful,ort-logging-level", () => {
    const { settings, notices } = readBackendConfig([
      "default-max-batch-size=8",
      "stateful,ort-logging-level=3",
      "onnxruntime,default-max-batch-size=16",
    ]);
    assert.equal(settings.defaultMaxBatchSize, 16);
    assert.deepEqual(settings.ortLogSeverity, { stateful: 3 });
    assert.deepEqual(notices, []);
  });

  it("accepts Triton's other settings with one notice each", () => {
    const { notices } = readBackendConfig([
      "onnxruntime,enable-global-threadpool=1",
      "python,shm-default-byte-size=1048576",
      "stateful,something-new=1",
    ]);
    assert.equal(notices.length, 3);
    assert.match(notices[0]!, /^--backend-config onnxruntime,enable-global-threadpool has no effect: /);
    assert.match(notices[1]!, /not backend 'python'/);
    assert.match(notices[2]!, /stateful,something-new is not a setting seqserve knows/);
  });

  it("refuses malformed settings and values on the command line (usage error)", () => {
    for (const [value, message] of [
      ["stateful", "expects <backend>,<setting>=<value>"],
      ["stateful,ort-logging-level=7", "stateful,ort-logging-level must be a whole number from 0 to 4"],
      ["default-max-batch-size=lots", "default-max-batch-size must be a whole number"],
    ] as const) {
      assert.throws(
        () => parseCommandLine(["--model-repository", ".", `--backend-config=${value}`]),
        (error: unknown) => error instanceof UsageError && error.message.includes(message),
        value,
      );
    }
  });

  it("default-max-batch-size is what autocomplete gives a model that can batch", () => {
    const io: ModelIo = { inputs: [tensor("x", "FP32", [-1, 4])], outputs: [tensor("y", "FP32", [-1, 4])] };
    const { config } = resolveModelConfig({
      parsed: undefined,
      modelName: "m",
      modelDir: "m",
      modelIo: io,
      defaultMaxBatchSize: 8,
    });
    assert.equal(config.maxBatchSize, 8);
  });

  it("--model-load-thread-count and the backend's launch line parse as Triton's do", () => {
    const command = parseCommandLine([
      "--grpc-port",
      "8005",
      "--model-repository",
      ".",
      "--backend-config=stateful,ort-logging-level=3",
      "--model-load-thread-count",
      "1",
    ]);
    assert.equal(command.kind, "serve");
    if (command.kind !== "serve") return;
    assert.equal(command.options.grpcPort, 8005);
    assert.equal(command.options.modelLoadThreadCount, 1);
    assert.deepEqual(command.options.backendSettings.ortLogSeverity, { stateful: 3 });
  });
});
