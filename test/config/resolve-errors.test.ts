import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { parseModelConfigText, resolveModelConfig } from "../../src/config/index.ts";
import type { ModelIo } from "../../src/core/model-io.ts";
import { assertConfigError } from "./config-assertions.ts";
import { MODEL_IO, tensor } from "./model-io-fixtures.ts";

const FILE = "models/m/config.pbtxt";
const IO =
  'input { name: "x" data_type: TYPE_FP32 dims: [ 4 ] }\noutput { name: "y" data_type: TYPE_FP32 dims: [ 4 ] }\n';
const SEQ_IO: ModelIo = {
  inputs: [tensor("x", "FP32", [-1, 4]), tensor("START", "INT32", [-1, 1]), tensor("S_IN", "FP32", [-1, 2])],
  outputs: [tensor("y", "FP32", [-1, 4]), tensor("S_OUT", "FP32", [-1, 2])],
};

interface Case {
  readonly name: string;
  readonly text: string;
  readonly line: number;
  readonly includes: string;
  readonly modelIo?: ModelIo;
  readonly modelDir?: string;
}

function check(c: Case): void {
  assertConfigError(
    () =>
      resolveModelConfig({
        parsed: parseModelConfigText(c.text, { file: FILE }),
        modelName: "m",
        modelDir: c.modelDir ?? "models/m",
        modelIo: c.modelIo,
      }),
    { file: FILE, line: c.line, includes: c.includes },
  );
}

describe("invalid model configurations", () => {
  const cases: Case[] = [
    {
      name: "a name other than the directory's",
      text: `${IO}name: "other"`,
      line: 3,
      includes: "unexpected directory name 'm' for model 'other', directory name must equal model name",
    },
    {
      name: "another platform",
      text: `${IO}platform: "tensorrt_plan"`,
      line: 3,
      includes: "platform 'tensorrt_plan' of model 'm' is not supported: seqserve serves ONNX models",
    },
    {
      name: "another backend",
      text: `${IO}\nbackend: "python"`,
      line: 4,
      includes: "backend 'python' of model 'm' is not supported",
    },
    {
      name: "an ensemble",
      text: `${IO}ensemble_scheduling { }`,
      line: 3,
      includes: "ensemble scheduling (model 'm') is not supported",
    },
    {
      name: "a negative max_batch_size",
      text: `${IO}max_batch_size: -1`,
      line: 3,
      includes: "'max_batch_size' must be non-negative",
    },
    {
      name: "a zero dimension",
      text: 'input { name: "x" data_type: TYPE_FP32\n dims: [ 4, 0 ] }\noutput { name: "y" data_type: TYPE_FP32 dims: [4] }',
      line: 2,
      includes: "model input 'x' dimension must be integer >= 1, or -1 to indicate a variable-size dimension",
    },
    {
      name: "missing dims",
      text: 'input { name: "x" data_type: TYPE_FP32 }\noutput { name: "y" data_type: TYPE_FP32 dims: [4] }',
      line: 1,
      includes: "model input 'x' must specify 'dims' for model 'm'",
    },
    {
      name: "a reshape of another size",
      text: 'max_batch_size: 2\ninput { name: "x" data_type: TYPE_FP32 dims: [ 4 ]\n  reshape { shape: [ 2, 3 ] } }\noutput { name: "y" data_type: TYPE_FP32 dims: [4] }',
      line: 3,
      includes: "model input 'x' has different size for dims and reshape",
    },
    {
      name: "a reshape with another number of variable dimensions",
      text: 'max_batch_size: 2\ninput { name: "x" data_type: TYPE_FP32 dims: [ -1, 4 ]\n  reshape { shape: [ -1, 2, -1 ] } }\noutput { name: "y" data_type: TYPE_FP32 dims: [4] }',
      line: 3,
      includes: "has different number of variable-size dimensions for dims and reshape",
    },
    {
      name: "an input listed twice",
      text: `${IO}input { name: "x" data_type: TYPE_FP32 dims: [ 4 ] }`,
      line: 3,
      includes: "model input 'x' is listed twice",
    },
    {
      name: "a ragged batch",
      text: `max_batch_size: 8\ninput { name: "x" data_type: TYPE_FP32 dims: [ -1 ]\n allow_ragged_batch: true }\noutput { name: "y" data_type: TYPE_FP32 dims: [ -1 ] }`,
      line: 3,
      includes: "input 'x' of model 'm' allows ragged batches, which seqserve does not support",
    },
    {
      name: "an optional input of an ONNX model that batches (as ONNX Runtime's backend refuses it)",
      text: `max_batch_size: 8\ninput { name: "x" data_type: TYPE_FP32 dims: [ 4 ]\n optional: true }\noutput { name: "y" data_type: TYPE_FP32 dims: [ 4 ] }`,
      line: 3,
      includes: "optional input 'x' is not supported for models that support batching",
    },
    {
      name: "GPUs on a CPU instance group",
      text: `${IO}instance_group [ { kind: KIND_CPU gpus: [ 0 ] } ]`,
      line: 3,
      includes: "has kind KIND_CPU but specifies one or more GPUs",
    },
    {
      name: "an empty specific version policy",
      text: `${IO}version_policy { specific { } }`,
      line: 3,
      includes: "the specific version policy lists no versions",
    },
    {
      name: "a preferred batch size above max_batch_size",
      text: `max_batch_size: 8\n${IO}dynamic_batching {\n  preferred_batch_size: [ 4, 16 ]\n}`,
      line: 5,
      includes: "dynamic batching preferred size 16 must be <= max batch size 8 for model 'm'",
    },
    {
      name: "a slot utilization above 1",
      text: `${IO}sequence_batching {\n  direct { minimum_slot_utilization: 1.5 }\n}`,
      line: 4,
      includes: "sequence batching minimum slot utilization must be in range (0.0, 1.0] for model 'm'",
    },
    {
      name: "a slot utilization beyond float32, so infinite",
      text: `${IO}sequence_batching {\n  direct { minimum_slot_utilization: 1e39 }\n}`,
      line: 4,
      includes: "sequence batching minimum slot utilization must be in range (0.0, 1.0] for model 'm'",
    },
    {
      name: "a preferred batch size above max_batch_size for Oldest",
      text: `max_batch_size: 4\n${IO}sequence_batching {\n  oldest {\n    max_candidate_sequences: 4\n    preferred_batch_size: [ 8 ]\n  }\n}`,
      line: 7,
      includes: "sequence batching preferred batch size 8 must be <= max batch size 4",
    },
    {
      name: "two START controls",
      text: `${IO}sequence_batching {\n  control_input [\n    { name: "A" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [0, 1] } ] },\n    { name: "B" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [0, 1] } ] }\n  ]\n}`,
      line: 6,
      includes: "sequence batching specifies multiple CONTROL_SEQUENCE_START tensors for model 'm'",
    },
    {
      name: "one control tensor used twice",
      text: `${IO}sequence_batching {\n  control_input [\n    { name: "A" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [0, 1] } ] },\n    { name: "A" control [ { kind: CONTROL_SEQUENCE_END int32_false_true: [0, 1] } ] }\n  ]\n}`,
      line: 6,
      includes: "sequence batching control tensor 'A' is specified for multiple control kinds",
    },
    {
      name: "a control without its false/true values",
      text: `${IO}sequence_batching { control_input [ { name: "A" control [ {\n kind: CONTROL_SEQUENCE_READY } ] } ] }`,
      line: 4,
      includes:
        "sequence batching must specify either 'int32_false_true', 'fp32_false_true' or 'bool_false_true' for CONTROL_SEQUENCE_READY",
    },
    {
      name: "a control with two encodings",
      text: `${IO}sequence_batching { control_input [ { name: "A" control [ { kind: CONTROL_SEQUENCE_END int32_false_true: [0, 1]\n fp32_false_true: [0, 1] } ] } ] }`,
      line: 4,
      includes:
        "sequence batching specifies more than one from 'int32_false_true', 'fp32_false_true' and 'bool_false_true'",
    },
    {
      name: "a control with three values",
      text: `${IO}sequence_batching { control_input [ { name: "A" control [ { kind: CONTROL_SEQUENCE_END\n bool_false_true: [false, true, true] } ] } ] }`,
      line: 4,
      includes:
        "sequence batching control 'bool_false_true' must have exactly 2 entries for CONTROL_SEQUENCE_END",
    },
    {
      name: "a correlation id of a float type",
      text: `${IO}sequence_batching { control_input [ { name: "ID" control [ { kind: CONTROL_SEQUENCE_CORRID\n data_type: TYPE_FP32 } ] } ] }`,
      line: 4,
      includes:
        "unexpected data type for control CONTROL_SEQUENCE_CORRID for model 'm'. Allowed data types are TYPE_UINT64",
    },
    {
      name: "a correlation id with false/true values",
      text: `${IO}sequence_batching { control_input [ { name: "ID" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_UINT64\n int32_false_true: [0, 1] } ] } ] }`,
      line: 4,
      includes: "sequence batching must not specify either 'int32_false_true'",
    },
    {
      name: "a control tensor also listed as an input",
      text: `${IO}sequence_batching { control_input [ {\n name: "x" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [0, 1] } ] } ] }`,
      line: 1,
      includes: "input 'x' of model 'm' is a sequence control or state tensor",
    },
    {
      name: "a state input also listed as an input",
      text: `${IO}sequence_batching { state [ {\n input_name: "x" output_name: "s_out" data_type: TYPE_FP32 dims: [4] } ] }`,
      line: 1,
      includes: "input 'x' of model 'm' is a sequence control or state tensor",
    },
    {
      name: "a state without an output name",
      text: `${IO}sequence_batching { state [ { input_name: "s" data_type: TYPE_FP32 dims: [4] } ] }`,
      line: 3,
      includes: "state 's' of model 'm' must specify 'output_name'",
    },
    {
      name: "a string state",
      text: `${IO}sequence_batching { state [ { input_name: "s" output_name: "t"\n data_type: TYPE_STRING dims: [1] } ] }`,
      line: 4,
      includes: "has data_type TYPE_STRING; seqserve keeps numeric state only",
    },
    {
      name: "two initial states",
      text: `${IO}sequence_batching { state [ { input_name: "s" output_name: "t" data_type: TYPE_FP32 dims: [2]\n initial_state { data_type: TYPE_FP32 dims: [2] zero_data: true name: "a" }\n initial_state { data_type: TYPE_FP32 dims: [2] zero_data: true name: "b" } } ] }`,
      line: 5,
      includes:
        "initial_state field for state input 's' must contain exactly one or zero element. Found '2' elements.",
    },
    {
      name: "an initial state with a variable dimension",
      text: `${IO}sequence_batching { state [ { input_name: "s" output_name: "t" data_type: TYPE_FP32 dims: [-1]\n initial_state { data_type: TYPE_FP32 dims: [-1] zero_data: true name: "a" } } ] }`,
      line: 4,
      includes: "'initial_state' field for state input name 's' contains variable dimensions.",
    },
    {
      name: "an initial state of another rank than its state",
      text: `${IO}sequence_batching { state [ { input_name: "s" output_name: "t" data_type: TYPE_FP32 dims: [2]\n initial_state { data_type: TYPE_FP32 dims: [1, 2] zero_data: true name: "a" } } ] }`,
      line: 4,
      includes:
        "Number of dimensions in 'initial_state' doesn't match the size of 'state' dimensions for state input 's'. 2 != 1",
    },
    {
      name: "an initial state dim other than its state's",
      text: `${IO}sequence_batching { state [ { input_name: "s" output_name: "t" data_type: TYPE_FP32 dims: [2]\n initial_state { data_type: TYPE_FP32 dims: [3] zero_data: true name: "a" } } ] }`,
      line: 4,
      includes: "'initial_state' dim for input name 's' doesn't match 'state' dim description. 3 != 2",
    },
    {
      name: "an initial state of another type",
      text: `${IO}sequence_batching { state [ { input_name: "s" output_name: "t" data_type: TYPE_FP32 dims: [2]\n initial_state { data_type: TYPE_INT32 dims: [2] zero_data: true name: "a" } } ] }`,
      line: 4,
      includes:
        "The data type used for 'initial_state' field of state 's' does not match the state data type.",
    },
    {
      name: "an initial state file that does not exist",
      text: `${IO}sequence_batching { state [ { input_name: "s" output_name: "t" data_type: TYPE_FP32 dims: [2]\n initial_state { data_type: TYPE_FP32 dims: [2] name: "a"\n data_file: "missing.bin" } } ] }`,
      line: 5,
      includes:
        "failed to open text file for read /models/m/initial_state/missing.bin: No such file or directory",
      modelDir: "/models/m",
    },
    {
      name: "an initial state file outside the initial_state folder",
      text: `${IO}sequence_batching { state [ { input_name: "s" output_name: "t" data_type: TYPE_FP32 dims: [2]\n initial_state { data_type: TYPE_FP32 dims: [2] name: "a"\n data_file: "../config.pbtxt" } } ] }`,
      line: 5,
      includes: "must name a file in the model's initial_state folder",
    },
    {
      name: "a malformed state_pairs parameter, quoted",
      text: `${IO}sequence_batching { }\nparameters { key: "state_pairs"\n value { string_value: "<<<a b>>>" } }`,
      line: 5,
      includes: "parameter 'state_pairs' must be a list of '<<<input, output>>>' pairs, got '<<<a b>>>'",
      modelIo: SEQ_IO,
    },
    {
      name: "state_pairs without sequence batching",
      text: `${IO}parameters { key: "state_pairs"\n value { string_value: "<<<S_IN, S_OUT>>>" } }`,
      line: 4,
      includes:
        "parameter 'state_pairs' applies to sequence batching, but model 'm' has no sequence_batching",
    },
    {
      name: "a paired state with two variable dimensions",
      text: `max_batch_size: 4\n${IO}sequence_batching { }\nparameters { key: "state_pairs" value { string_value: "<<<S_IN, S_OUT>>>" } }`,
      line: 5,
      includes:
        "state 'S_IN' of model 'm' must have exactly one variable dimension, its batch axis, but its shape is [-1, -1]",
      modelIo: {
        inputs: [tensor("x", "FP32", [-1, 4]), tensor("S_IN", "FP32", [-1, -1])],
        outputs: [tensor("y", "FP32", [-1, 4]), tensor("S_OUT", "FP32", [-1, -1])],
      },
    },
    {
      name: "state_pairs naming a tensor the model lacks",
      text: `max_batch_size: 4\n${IO}sequence_batching { }\nparameters { key: "state_pairs" value { string_value: "<<<S_IN, nope>>>" } }`,
      line: 5,
      includes: "parameter 'state_pairs' names 'nope', which is not an output of model 'm'",
      modelIo: SEQ_IO,
    },
    {
      name: "a fixed state larger than sequence_state_max_bytes",
      text: `max_batch_size: 4\n${IO}sequence_batching { }\nparameters [ { key: "state_pairs" value { string_value: "<<<S_IN, S_OUT>>>" } }, { key: "sequence_state_max_bytes" value { string_value: "4" } } ]`,
      line: 5,
      includes:
        "the state of model 'm' takes at least 8 bytes per sequence, more than its sequence_state_max_bytes (4): set the parameter higher",
      modelIo: SEQ_IO,
    },
    {
      name: "lazy state-buffer allocation with only some of its parameters",
      text: `${IO}sequence_batching { }\nparameters { key: "initial_buffer_size" value { string_value: "8" } }`,
      line: 4,
      includes:
        "lazy state-buffer allocation needs all of initial_buffer_size, subsequent_buffer_size, buffer_alloc_threshold, buffer_dealloc_threshold; missing subsequent_buffer_size",
    },
    {
      name: "an initial state buffer smaller than a batch",
      text: `max_batch_size: 8\n${IO.replace("dims: [ 1 ]", "dims: [ 1 ]")}sequence_batching { }\nparameters [ { key: "initial_buffer_size" value { string_value: "4" } }, { key: "subsequent_buffer_size" value { string_value: "8" } }, { key: "buffer_alloc_threshold" value { string_value: "8" } }, { key: "buffer_dealloc_threshold" value { string_value: "16" } } ]`,
      line: 5,
      includes: "Initial buffer size must be larger than or equal to the max batch size",
    },
    {
      name: "a logging level the stateful backend does not have",
      text: `${IO}sequence_batching { }\nparameters { key: "logging_level" value { string_value: "LOUD" } }`,
      line: 4,
      includes: "parameter 'logging_level' must be NONE, INFO or VERBOSE, got 'LOUD'",
    },
    {
      name: "a negative backlog limit",
      text: `${IO}sequence_batching { }\nparameters { key: "sequence_backlog_limit" value { string_value: "-1" } }`,
      line: 4,
      includes: "parameter 'sequence_backlog_limit' must be an integer >= 0, got '-1'",
    },
    {
      name: "a boolean parameter that is not one",
      text: `${IO}sequence_batching { }\nparameters { key: "infer_end_requests" value { string_value: "maybe" } }`,
      line: 4,
      includes: "parameter 'infer_end_requests' must be true, false, 1 or 0, got 'maybe'",
    },
    {
      name: "a use ratio above 1",
      text: `${IO}sequence_batching { }\nparameters { key: "max_candidate_sequence_use_ratio" value { string_value: "1.5" } }`,
      line: 4,
      includes: "parameter 'max_candidate_sequence_use_ratio' must be a number in (0, 1], got '1.5'",
    },
    {
      name: "an idle timeout that is neither 'never' nor a number",
      text: `${IO}sequence_batching { }\nparameters { key: "sequence_idle_timeout" value { string_value: "soon" } }`,
      line: 4,
      includes:
        "parameter 'sequence_idle_timeout' must be 'never' or a number of microseconds >= 1, got 'soon'",
    },
    {
      name: "shared_inputs naming an unknown input",
      text: `${IO}parameters { key: "shared_inputs" value { string_value: "x, sr" } }`,
      line: 3,
      includes: "parameter 'shared_inputs' names 'sr', which is not an input of model 'm'",
    },
    {
      name: "a decoupled model",
      text: `${IO}model_transaction_policy {\n  decoupled: true\n}`,
      line: 4,
      includes: "model 'm' is decoupled",
    },
    {
      name: "a response cache with sequence batching",
      text: `${IO}sequence_batching { }\nresponse_cache { enable: true }`,
      line: 4,
      includes: "Response Cache does not currently support model 'm' with sequence batching scheduler",
    },
  ];
  for (const c of cases) it(`reports ${c.name}`, () => check(c));
});

describe("configurations that do not match their model", () => {
  const cases: Case[] = [
    {
      name: "another datatype",
      text: 'max_batch_size: 8\ninput { name: "INPUT0"\n data_type: TYPE_FP32 dims: [16] }',
      line: 3,
      includes:
        "unable to load model 'm', configuration expects datatype TYPE_FP32 for input 'INPUT0', model provides TYPE_INT32",
      modelIo: MODEL_IO.add_sub,
    },
    {
      name: "a rank that forgets the implicit batch dimension",
      text: 'max_batch_size: 8\ninput { name: "INPUT0" data_type: TYPE_INT32\n dims: [-1, 16] }',
      line: 3,
      includes:
        "model input 'INPUT0' of model 'm' has 2 dimensions [-1, 16] in the model, as many as its configured dims, but max_batch_size > 0 needs one more",
      modelIo: MODEL_IO.add_sub,
    },
    {
      name: "a rank off by more than the batch dimension",
      text: 'max_batch_size: 8\ninput { name: "INPUT0" data_type: TYPE_INT32\n dims: [2, 8, 1] }',
      line: 3,
      includes:
        "model input 'INPUT0' of model 'm' has 2 dimensions [-1, 16] in the model, but the configuration gives it 4 [-1, 2, 8, 1] (the batch dimension, as max_batch_size > 0, followed by dims)",
      modelIo: MODEL_IO.add_sub,
    },
    {
      name: "another fixed dimension",
      text: 'max_batch_size: 8\ninput { name: "INPUT0" data_type: TYPE_INT32 dims: [16] }\noutput { name: "OUTPUT0" data_type: TYPE_INT32\n dims: [ 8 ] }',
      line: 4,
      includes: "dimension 1 of model output 'OUTPUT0' is 8 in the configuration but 16 in model 'm'",
      modelIo: MODEL_IO.add_sub,
    },
    {
      name: "a first dimension that cannot be the batch",
      text: 'max_batch_size: 8\ninput { name: "x" data_type: TYPE_FP32\n dims: [3] }\noutput { name: "y" data_type: TYPE_FP32 dims: [3] }',
      line: 3,
      includes: "has a first dimension of 1 in the model [1, 3], so it cannot be the batch dimension",
      modelIo: { inputs: [tensor("x", "FP32", [1, 3])], outputs: [tensor("y", "FP32", [-1, 3])] },
    },
    {
      name: "an input the model does not have",
      text: 'max_batch_size: 8\ninput { name: "INPUT0" data_type: TYPE_INT32 dims: [16] }\ninput {\n name: "INPUT9" data_type: TYPE_INT32 dims: [16] }',
      line: 4,
      includes: "unexpected inference input 'INPUT9' for model 'm', allowed inputs are: INPUT0, INPUT1",
      modelIo: MODEL_IO.add_sub,
    },
    {
      name: "a model input nothing feeds",
      text: 'max_batch_size: 8\ninput { name: "INPUT0" data_type: TYPE_INT32 dims: [16] }\noutput { name: "OUTPUT0" data_type: TYPE_INT32 dims: [16] }',
      line: 2,
      includes: "input 'INPUT1' of model 'm' is given no value",
      modelIo: MODEL_IO.add_sub,
    },
    {
      name: "a control tensor the model lacks",
      text: `max_batch_size: 4\n${IO}sequence_batching { control_input [ {\n name: "END" control [ { kind: CONTROL_SEQUENCE_END int32_false_true: [0, 1] } ] } ] }`,
      line: 5,
      includes: "configuration specified sequence control 'END', but model 'm' does not provide that input",
      modelIo: SEQ_IO,
    },
    {
      name: "a control tensor of another type",
      text: `max_batch_size: 4\n${IO}sequence_batching { control_input [ { name: "START"\n control [ { kind: CONTROL_SEQUENCE_START bool_false_true: [false, true] } ] } ] }\nparameters { key: "state_pairs" value { string_value: "<<<S_IN, S_OUT>>>" } }`,
      line: 5,
      includes:
        "sequence control 'START', the model expects data-type int32 but the model configuration specifies data-type TYPE_BOOL",
      modelIo: SEQ_IO,
    },
    {
      name: "a state whose dims differ from the model's",
      text: `max_batch_size: 4\n${IO}sequence_batching { control_input [ { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [0, 1] } ] } ]\n state [ { input_name: "S_IN" output_name: "S_OUT" data_type: TYPE_FP32\n dims: [ 3 ] } ] }`,
      line: 6,
      includes: "dimension 1 of state tensor 'S_IN' is 3 in the configuration but 2 in model 'm'",
      modelIo: SEQ_IO,
    },
    {
      name: "shared_inputs naming an input the model batches",
      text: `max_batch_size: 4\ninput { name: "x" data_type: TYPE_FP32\n dims: [4] }\noutput { name: "y" data_type: TYPE_FP32 dims: [4] }\nparameters { key: "shared_inputs" value { string_value: "x" } }`,
      line: 3,
      includes: "input 'x' is listed in shared_inputs, but model 'm' gives it a batch dimension [-1, 4]",
      modelIo: { inputs: [tensor("x", "FP32", [-1, 4])], outputs: [tensor("y", "FP32", [-1, 4])] },
    },
  ];
  for (const c of cases) it(`reports ${c.name}`, () => check(c));

  describe("initial state files", () => {
    let modelDir = "";
    before(() => {
      modelDir = mkdtempSync(join(tmpdir(), "seqserve-config-"));
      mkdirSync(join(modelDir, "initial_state"));
      writeFileSync(join(modelDir, "initial_state", "short.bin"), Buffer.alloc(4));
    });
    after(() => rmSync(modelDir, { recursive: true, force: true }));

    it("reports a data file too small for the state, in Triton's words", () =>
      check({
        name: "",
        text: `${IO}sequence_batching { state [ { input_name: "s" output_name: "t" data_type: TYPE_FP32 dims: [2]\n initial_state { data_type: TYPE_FP32 dims: [2] name: "a"\n data_file: "short.bin" } } ] }`,
        line: 5,
        includes:
          "initial_state setting expects 8 bytes, but the data provided from short.binonly has 4 bytes.",
        modelDir,
      }));
  });
});
