// seqserve's model configuration layer: Triton config.pbtxt / config.json and OpenVINO
// Model Server config.json, parsed against proto/model_config.proto, completed from the
// model file, validated once, frozen into the core ModelConfig.

export { ConfigError, type SourcePosition } from "./config-error.ts";
export {
  type GraphOptimization,
  graphOptimizationOf,
  type LoadSettings,
  readLoadSettings,
} from "./load-settings.ts";
export { handlerFile, withModelCodeBackend } from "./model-code.ts";
export {
  formatOfFile,
  type ModelConfigTextFormat,
  type ModelConfigTextOptions,
  parseModelConfigFile,
  parseModelConfigText,
} from "./model-config-file.ts";
export { loadModelConfigRoot, MODEL_CONFIG_PROTO_PATH, modelConfigType } from "./model-config-schema.ts";
export {
  DEFAULT_MAX_SEQUENCE_NUMBER,
  DEFAULT_SEQUENCE_CLEANER_POLL_MINUTES,
  type OvmsConfig,
  type OvmsModelEntry,
  type OvmsSequenceOptions,
  type OvmsToParsedOptions,
  parseOvmsConfig,
  readOvmsConfig,
  SINGLE_MODEL_SOURCE,
  singleModelConfig,
} from "./ovms-config.ts";
export { findSharedInputs, findStatePairs, type StatePairSearch } from "./ovms-from-model.ts";
export type {
  ConfigFormat,
  ParsedMessage,
  ParsedModelConfig,
  ParsedScalar,
  ParsedValue,
  SourceLocations,
} from "./parsed-config.ts";
export { DEFAULT_MAX_BATCH_SIZE } from "./resolve/io-config.ts";
export {
  DEFAULT_MODEL_FILENAME,
  ONNX_BACKEND,
  ONNX_PLATFORM,
  STATEFUL_BACKEND,
  TYPESCRIPT_BACKEND,
} from "./resolve/model-identity.ts";
export {
  type ResolvedModelConfig,
  type ResolveModelConfigOptions,
  resolveModelConfig,
} from "./resolve/resolve-model-config.ts";
export { DEFAULT_BACKLOG_LIMIT, DEFAULT_SEQUENCE_IDLE_US } from "./resolve/sequence-batching.ts";
export { type TritonJsonOptions, toTritonJson } from "./triton-json.ts";
