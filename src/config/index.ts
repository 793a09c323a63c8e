// seqserve's model configuration layer: Triton config.pbtxt / config.json and OpenVINO
// Model Server config.json, parsed against proto/model_config.proto, completed from the
// model file, validated once, frozen into the core ModelConfig.

export { ConfigError } from "./config-error.ts";
export { type LoadSettings, readLoadSettings } from "./load-settings.ts";
export { handlerFile, withModelCodeBackend } from "./model-code.ts";
export { parseModelConfigFile, parseModelConfigText } from "./model-config-file.ts";
export { loadModelConfigRoot, MODEL_CONFIG_PROTO_PATH, modelConfigType } from "./model-config-schema.ts";
export {
  type OvmsModelEntry,
  type OvmsToParsedOptions,
  parseOvmsConfig,
  readOvmsConfig,
  singleModelConfig,
} from "./ovms-config.ts";
export { findSharedInputs, findStatePairs } from "./ovms-from-model.ts";
export type { ParsedModelConfig } from "./parsed-config.ts";
export { DEFAULT_MAX_BATCH_SIZE } from "./resolve/io-config.ts";
export { STATEFUL_BACKEND, TYPESCRIPT_BACKEND } from "./resolve/model-identity.ts";
export { type ResolvedModelConfig, resolveModelConfig } from "./resolve/resolve-model-config.ts";
export { toTritonJson } from "./triton-json.ts";
