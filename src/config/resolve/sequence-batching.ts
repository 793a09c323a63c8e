import { configTypeName, type DataType, elementByteSize, fromConfigTypeName } from "../../core/datatype.ts";
import type {
  ControlInputConfig,
  ControlKind,
  SequenceBatchingConfig,
  SequenceStrategy,
  StateConfig,
} from "../../core/model-config.ts";
import type { ModelIo } from "../../core/model-io.ts";
import { formatShapeSpaced, type MessageNode } from "./config-node.ts";
import { preferredBatchSizes } from "./dynamic-batching.ts";
import { resolveStates } from "./implicit-state.ts";
import { STATEFUL_BACKEND } from "./model-identity.ts";
import type { ModelParameters } from "./model-parameters.ts";
import {
  resolveStatefulBackendParameters,
  STATEFUL_BACKEND_SEQUENCE_PARAMETERS,
  sequenceCapacity,
} from "./stateful-backend-parameters.ts";

// The sequence batcher's settings, validated completely with Triton's rules and messages
// where Triton has them: the strategy (Direct by default, or Oldest), the idle timeout,
// control tensors and implicit state, plus seqserve's and the ONNX stateful backend's
// parameters (sequence_idle_timeout, sequence_idle_from, sequence_backlog_limit,
// sequence_state_max_bytes, store_states_as_fp16,
// infer_end_requests, max_candidate_sequence_use_ratio).

/** Triton's default idle time of a sequence (max_sequence_idle_microseconds unset or 0). */
const DEFAULT_SEQUENCE_IDLE_US = 1_000_000;
const DEFAULT_BACKLOG_LIMIT = 1024;
/** The most bytes a sequence's state may hold unless `sequence_state_max_bytes` says (as for handler models). */
const DEFAULT_STATE_MAX_BYTES = 64 * 1024 * 1024;

/** Parameters that only mean something with sequence batching. */
const SEQUENCE_PARAMETERS = [
  "state_pairs",
  "sequence_idle_timeout",
  "sequence_idle_from",
  "sequence_backlog_limit",
  "store_states_as_fp16",
  "infer_end_requests",
  ...STATEFUL_BACKEND_SEQUENCE_PARAMETERS,
] as const;

const CONTROL_KINDS: Record<string, ControlKind> = {
  CONTROL_SEQUENCE_START: "START",
  CONTROL_SEQUENCE_END: "END",
  CONTROL_SEQUENCE_READY: "READY",
  CONTROL_SEQUENCE_CORRID: "CORRID",
};
const CORRID_TYPES = new Set(["TYPE_UINT64", "TYPE_INT64", "TYPE_UINT32", "TYPE_INT32", "TYPE_STRING"]);
const FLAG_ENCODINGS = [
  ["int32_false_true", "INT32"],
  ["fp32_false_true", "FP32"],
  ["bool_false_true", "BOOL"],
] as const;

export interface SequenceTensorNames {
  readonly controls: ReadonlySet<string>;
  readonly stateInputs: ReadonlySet<string>;
  readonly stateOutputs: ReadonlySet<string>;
  /** Tensors named by state_pairs. */
  readonly pairedTensors: ReadonlySet<string>;
}

/** Lower case as the backend has it (ASCII letters only, as C's tolower). */
const asciiLower = (name: string): string => name.replace(/[A-Z]/g, (c) => c.toLowerCase());

/**
 * The model input the ONNX stateful backend feeds its START control to: the input of that
 * name, else one whose name differs only in case (the backend compares the two lower-cased),
 * under the model's spelling. An input listed in 'input' is fed by the client, as the backend
 * takes the config's inputs first, and one named exactly as another control is that control's.
 */
function statefulStartInput(
  modelIo: ModelIo,
  name: string,
  listed: ReadonlySet<string>,
  controls: ReadonlySet<string>,
): string | undefined {
  if (modelIo.inputs.some((t) => t.name === name)) return name;
  const wanted = asciiLower(name);
  return modelIo.inputs.find(
    (t) => !listed.has(t.name) && !controls.has(t.name) && asciiLower(t.name) === wanted,
  )?.name;
}

const isStartControl = (input: MessageNode): boolean =>
  input.children("control")[0]?.string("kind", "CONTROL_SEQUENCE_START") === "CONTROL_SEQUENCE_START";

/**
 * The tensors the sequence batcher feeds or collects, read before inputs and outputs are
 * completed. With backend "stateful", the model input a START control feeds is named as the
 * model spells it, so that completing the inputs leaves it out.
 */
export function sequenceTensorNames(
  root: MessageNode,
  params: ModelParameters,
  modelIo: ModelIo | undefined,
  statefulBackend: boolean,
): SequenceTensorNames {
  const sequence = root.child("sequence_batching");
  const controlInputs = sequence?.children("control_input") ?? [];
  const configNames = new Set(controlInputs.map((c) => c.string("name")));
  const listed = new Set(root.children("input").map((input) => input.string("name")));
  const controls = new Set(
    controlInputs.map((c) => {
      const name = c.string("name");
      if (!statefulBackend || modelIo === undefined || !isStartControl(c)) return name;
      return statefulStartInput(modelIo, name, listed, configNames) ?? name;
    }),
  );
  const stateInputs = new Set<string>();
  const stateOutputs = new Set<string>();
  const pairedTensors = new Set<string>();
  for (const state of sequence?.children("state") ?? []) {
    stateInputs.add(state.string("input_name"));
    stateOutputs.add(state.string("output_name"));
  }
  if (sequence !== undefined) {
    for (const pair of params.statePairs()) {
      stateInputs.add(pair.input);
      stateOutputs.add(pair.output);
      pairedTensors.add(pair.input);
      pairedTensors.add(pair.output);
    }
  }
  return { controls, stateInputs, stateOutputs, pairedTensors };
}

function resolveControls(
  sequence: MessageNode,
  modelIo: ModelIo | undefined,
  maxBatchSize: number,
  inputNames: ReadonlySet<string>,
  statefulBackend: boolean,
): ControlInputConfig[] {
  const modelName = sequence.ctx.modelName;
  const names = new Set<string>();
  const kinds = new Set<string>();
  const configNames = new Set(sequence.children("control_input").map((input) => input.string("name")));
  return sequence.children("control_input").map((input): ControlInputConfig => {
    const name = input.string("name");
    if (name === "")
      input.fail("name", `sequence batching control tensor must have a name for model '${modelName}'`);
    if (names.has(name)) {
      input.fail(
        "name",
        `sequence batching control tensor '${name}' is specified for multiple control kinds for model '${modelName}'`,
      );
    }
    names.add(name);
    if (inputNames.has(name)) {
      input.fail(
        "name",
        `control tensor '${name}' of model '${modelName}' must not also be listed in 'input'`,
      );
    }
    const controls = input.children("control");
    if (controls.length === 0)
      input.fail("control", `control tensor '${name}' of model '${modelName}' must specify a control`);
    if (controls.length > 1) {
      input.failItem(
        "control",
        1,
        `control tensor '${name}' of model '${modelName}' has ${controls.length} controls; one tensor carries one control`,
      );
    }
    const control = controls[0]!;
    const kindName = control.string("kind", "CONTROL_SEQUENCE_START");
    const kind = CONTROL_KINDS[kindName] ?? "START";
    if (kinds.has(kindName)) {
      control.fail(
        "kind",
        `sequence batching specifies multiple ${kindName} tensors for model '${modelName}'`,
      );
    }
    kinds.add(kindName);

    const given = FLAG_ENCODINGS.filter(([field]) => control.list(field).length > 0);
    let datatype: DataType;
    let falseTrue: readonly [number, number] | undefined;
    if (kind === "CORRID") {
      if (given.length > 0) {
        control.fail(
          given[0]![0],
          `sequence batching must not specify either 'int32_false_true', 'fp32_false_true' or 'bool_false_true' for ${kindName} for model '${modelName}'`,
        );
      }
      const typeName = control.string("data_type", "TYPE_INVALID");
      if (!CORRID_TYPES.has(typeName)) {
        control.fail(
          "data_type",
          `unexpected data type for control ${kindName} for model '${modelName}'. Allowed data types are TYPE_UINT64, TYPE_INT64, TYPE_UINT32, TYPE_INT32 and TYPE_STRING`,
        );
      }
      datatype = fromConfigTypeName(typeName)!;
    } else {
      if (given.length === 0) {
        control.fail(
          "kind",
          `sequence batching must specify either 'int32_false_true', 'fp32_false_true' or 'bool_false_true' for ${kindName} for model '${modelName}'`,
        );
      }
      if (given.length > 1) {
        control.fail(
          given[1]![0],
          `sequence batching specifies more than one from 'int32_false_true', 'fp32_false_true' and 'bool_false_true' for ${kindName} for model '${modelName}'`,
        );
      }
      const [field, type] = given[0]!;
      const values = control.list(field);
      if (values.length !== 2) {
        control.fail(
          field,
          `sequence batching control '${field}' must have exactly 2 entries for ${kindName} for model '${modelName}'`,
        );
      }
      const [f, t] = values.map((v) => (typeof v === "boolean" ? Number(v) : (v as number)));
      datatype = type;
      falseTrue = [f!, t!];
    }

    let fed = true;
    let tensorName = name;
    if (modelIo !== undefined) {
      if (statefulBackend) {
        if (kind === "START") tensorName = statefulStartInput(modelIo, name, inputNames, configNames) ?? name;
        const model = statefulBackendControl(input, tensorName, kind, datatype, modelIo);
        fed = model !== undefined;
        if (model !== undefined) datatype = model;
      }
      if (fed) checkControlAgainstModel(input, tensorName, datatype, modelIo, maxBatchSize);
    }
    return {
      name: tensorName,
      kind,
      datatype,
      fed,
      ...(falseTrue === undefined ? {} : { falseTrue }),
    };
  });
}

/**
 * The ONNX stateful backend consumes the controls itself and feeds only the one whose name
 * is a model input (START mapped to the model's boolean `ResetSequence`, whatever its case),
 * converted to the model's type. Returns that type, or undefined when the model has no such
 * input.
 */
function statefulBackendControl(
  input: MessageNode,
  name: string,
  kind: ControlKind,
  datatype: DataType,
  modelIo: ModelIo,
): DataType | undefined {
  const tensor = modelIo.inputs.find((t) => t.name === name);
  if (tensor === undefined) return undefined;
  if (kind === "CORRID" || tensor.datatype === datatype) return datatype;
  if (tensor.datatype === "BOOL" || tensor.datatype === "INT32" || tensor.datatype === "FP32") {
    return tensor.datatype;
  }
  return input.fail(
    "control",
    `sequence control '${name}' of model '${input.ctx.modelName}' feeds a model input of type ${tensor.typeName}; ` +
      "a control can be fed as bool, int32 or float32",
  );
}

function checkControlAgainstModel(
  input: MessageNode,
  name: string,
  datatype: DataType,
  modelIo: ModelIo,
  maxBatchSize: number,
): void {
  const modelName = input.ctx.modelName;
  const tensor = modelIo.inputs.find((t) => t.name === name);
  if (tensor === undefined) {
    input.fail(
      "name",
      `configuration specified sequence control '${name}', but model '${modelName}' does not provide that input`,
    );
  }
  if (tensor.datatype !== datatype) {
    input.fail(
      "control",
      `unable to load model '${modelName}', sequence control '${name}', the model expects data-type ${tensor.typeName} ` +
        `but the model configuration specifies data-type ${configTypeName(datatype)}`,
    );
  }
  if (tensor.shape !== undefined) {
    const perRequest = maxBatchSize > 0 ? tensor.shape.slice(1) : tensor.shape;
    if (perRequest.length !== 1 || (perRequest[0] !== 1 && perRequest[0] !== -1)) {
      input.fail(
        "name",
        `unable to load model '${modelName}', sequence control '${name}' in model has dims ${formatShapeSpaced(perRequest)} but dims [1] is expected`,
      );
    }
  }
}

function resolveStrategy(sequence: MessageNode, maxBatchSize: number): SequenceStrategy {
  const modelName = sequence.ctx.modelName;
  const oldest = sequence.child("oldest");
  if (oldest !== undefined) {
    // Triton's scheduler: without a positive max_candidate_sequences, as many candidates as
    // a batch has rows (at least one).
    const candidates = oldest.number("max_candidate_sequences");
    return {
      kind: "oldest",
      maxCandidateSequences: candidates > 0 ? candidates : Math.max(1, maxBatchSize),
      preferredBatchSizes: preferredBatchSizes(
        oldest,
        maxBatchSize,
        "sequence batching preferred batch size",
      ),
      maxQueueDelayUs: oldest.safeNumber("max_queue_delay_microseconds"),
      preserveOrdering: oldest.bool("preserve_ordering"),
    };
  }
  const direct = sequence.child("direct");
  const utilization = direct?.number("minimum_slot_utilization") ?? 0;
  if (!(utilization >= 0 && utilization <= 1)) {
    direct?.fail(
      "minimum_slot_utilization",
      `sequence batching minimum slot utilization must be in range (0.0, 1.0] for model '${modelName}'`,
    );
  }
  return {
    kind: "direct",
    maxQueueDelayUs: direct?.safeNumber("max_queue_delay_microseconds") ?? 0,
    minimumSlotUtilization: utilization,
  };
}

/**
 * `sequence_state_max_bytes` (64 MiB unless set; handler models read it too). A state
 * whose every dimension is fixed has one size: past the limit, the model is refused at
 * load, rather than failing every step.
 */
function resolveStateMaxBytes(
  params: ModelParameters,
  modelName: string,
  states: readonly StateConfig[],
  storeStatesAsFp16: boolean,
): number {
  const key = "sequence_state_max_bytes";
  const limit = params.integer(key, DEFAULT_STATE_MAX_BYTES, 1);
  // The fixed states' bytes: all a state takes, or at least what it takes, when another
  // state grows.
  let bytes = 0;
  for (const state of states) {
    const dims = state.dims.filter((_, axis) => axis !== state.batchAxis);
    if (dims.some((d) => d < 0)) continue;
    const width = storeStatesAsFp16 && state.datatype === "FP32" ? 2 : (elementByteSize(state.datatype) ?? 0);
    bytes += dims.reduce((n, d) => n * d, 1) * width;
  }
  if (bytes > limit) {
    params.fail(
      key,
      `the state of model '${modelName}' takes at least ${bytes} bytes per sequence, more than its sequence_state_max_bytes (${limit}): set the parameter higher`,
    );
  }
  return limit;
}

/** seqserve's `sequence_idle_from`: `arrival` (Triton's, the default) or `last_step` (OVMS's). */
function resolveIdleFrom(params: ModelParameters): { idleFrom?: "last_step" } {
  const key = "sequence_idle_from";
  const raw = params.get(key);
  if (raw === undefined) return {};
  const value = raw.trim().toLowerCase();
  if (value === "arrival") return {};
  if (value === "last_step") return { idleFrom: value };
  return params.fail(key, `parameter '${key}' must be 'arrival' or 'last_step', got '${raw}'`);
}

/** The idle timeout: Triton's field (0 = one second), or seqserve's `sequence_idle_timeout` parameter. */
function resolveIdleTimeout(sequence: MessageNode, params: ModelParameters): number | undefined {
  const field = "max_sequence_idle_microseconds";
  if (sequence.safeNumber(field) === 0) sequence.set(field, BigInt(DEFAULT_SEQUENCE_IDLE_US));
  const key = "sequence_idle_timeout";
  const raw = params.get(key);
  if (raw === undefined) return sequence.safeNumber(field);
  if (raw.trim().toLowerCase() === "never") {
    // Written as 0 in the effective config: Triton never reports 0, so it reads as "no limit".
    sequence.set(field, 0n);
    return undefined;
  }
  if (!/^\s*\d+\s*$/.test(raw) || Number(raw) < 1 || !Number.isSafeInteger(Number(raw))) {
    params.fail(key, `parameter '${key}' must be 'never' or a number of microseconds >= 1, got '${raw}'`);
  }
  sequence.set(field, BigInt(Number(raw)));
  return Number(raw);
}

export interface SequenceContext {
  readonly root: MessageNode;
  readonly params: ModelParameters;
  readonly modelIo: ModelIo | undefined;
  readonly inputNames: ReadonlySet<string>;
  readonly modelDir: string;
  /** The model's backend (the stateful backend feeds controls and sets defaults its own way). */
  readonly backend: string;
  /** Instances over all instance groups. */
  readonly instanceCount: number;
}

export function resolveSequenceBatching(ctx: SequenceContext): SequenceBatchingConfig | undefined {
  const { root, params } = ctx;
  const modelName = root.ctx.modelName;
  const sequence = root.child("sequence_batching");
  if (sequence === undefined) {
    for (const key of SEQUENCE_PARAMETERS) {
      if (params.has(key)) {
        params.fail(
          key,
          `parameter '${key}' applies to sequence batching, but model '${modelName}' has no sequence_batching`,
        );
      }
    }
    return undefined;
  }
  if (root.child("response_cache")?.bool("enable") === true) {
    root
      .child("response_cache")
      ?.fail(
        "enable",
        `Response Cache does not currently support model '${modelName}' with sequence batching scheduler. Please disable the response cache.`,
      );
  }
  if (sequence.bool("iterative_sequence")) {
    sequence.fail(
      "iterative_sequence",
      `iterative sequences (model '${modelName}') need backend support that seqserve does not have`,
    );
  }
  const maxBatchSize = root.number("max_batch_size");
  const strategy = resolveStrategy(sequence, maxBatchSize);
  const maxSequenceIdleUs = resolveIdleTimeout(sequence, params);
  const statefulBackend = ctx.backend === STATEFUL_BACKEND;
  const controlInputs = resolveControls(sequence, ctx.modelIo, maxBatchSize, ctx.inputNames, statefulBackend);
  const states = resolveStates({
    sequence,
    params,
    modelIo: ctx.modelIo,
    maxBatchSize,
    inputNames: ctx.inputNames,
    modelDir: ctx.modelDir,
  });
  for (const control of controlInputs) {
    if (states.some((state) => state.inputName === control.name)) {
      sequence.fail(
        "control_input",
        `tensor '${control.name}' of model '${modelName}' is both a control and a state input`,
      );
    }
  }

  // As the stateful backend: FP32 states are kept as FP16; states of other types as they are.
  const storeStatesAsFp16 = params.bool("store_states_as_fp16", false);
  if (storeStatesAsFp16 && !states.some((state) => state.datatype === "FP32")) {
    sequence.ctx.note(
      `parameter 'store_states_as_fp16' of model '${modelName}' has no effect: it applies to FP32 states, and the model has none`,
    );
  }
  const backendSettings = resolveStatefulBackendParameters({
    sequence,
    params,
    statefulBackend,
    maxBatchSize,
    strategy: strategy.kind,
    capacity: sequenceCapacity(strategy, maxBatchSize, ctx.instanceCount),
  });

  return {
    strategy,
    maxSequenceIdleUs,
    ...resolveIdleFrom(params),
    controlInputs,
    states,
    backlogLimit: params.integer("sequence_backlog_limit", DEFAULT_BACKLOG_LIMIT, 0),
    stateMaxBytes: resolveStateMaxBytes(params, modelName, states, storeStatesAsFp16),
    storeStatesAsFp16,
    inferEndRequests: params.bool("infer_end_requests", true),
    ...backendSettings,
  };
}
