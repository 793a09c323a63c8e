import assert from "node:assert/strict";
import { join } from "node:path";
import { test } from "node:test";
import protobuf from "protobufjs";
import { PROTO_DIR } from "../../src/frontends/grpc/proto-definitions.ts";

// The field numbers are the wire contract with every Triton client: check them against
// PROTOCOLS.md (and Triton's grpc_service.proto) with an independent protobuf parser.

const root = new protobuf.Root().loadSync(
  [join(PROTO_DIR, "grpc_service.proto"), join(PROTO_DIR, "health.proto")],
  { keepCase: true },
);

const EXPECTED: Record<string, Record<string, number>> = {
  "inference.InferParameter": {
    bool_param: 1,
    int64_param: 2,
    string_param: 3,
    double_param: 4,
    uint64_param: 5,
  },
  "inference.InferTensorContents": {
    bool_contents: 1,
    int_contents: 2,
    int64_contents: 3,
    uint_contents: 4,
    uint64_contents: 5,
    fp32_contents: 6,
    fp64_contents: 7,
    bytes_contents: 8,
  },
  "inference.ModelInferRequest": {
    model_name: 1,
    model_version: 2,
    id: 3,
    parameters: 4,
    inputs: 5,
    outputs: 6,
    raw_input_contents: 7,
  },
  "inference.ModelInferRequest.InferInputTensor": {
    name: 1,
    datatype: 2,
    shape: 3,
    parameters: 4,
    contents: 5,
  },
  "inference.ModelInferRequest.InferRequestedOutputTensor": { name: 1, parameters: 2 },
  "inference.ModelInferResponse": {
    model_name: 1,
    model_version: 2,
    id: 3,
    parameters: 4,
    outputs: 5,
    raw_output_contents: 6,
  },
  "inference.ModelInferResponse.InferOutputTensor": {
    name: 1,
    datatype: 2,
    shape: 3,
    parameters: 4,
    contents: 5,
  },
  "inference.ModelStreamInferResponse": { error_message: 1, infer_response: 2 },
  "inference.ServerLiveResponse": { live: 1 },
  "inference.ServerReadyResponse": { ready: 1 },
  "inference.ModelReadyRequest": { name: 1, version: 2 },
  "inference.ModelReadyResponse": { ready: 1 },
  "inference.ServerMetadataResponse": { name: 1, version: 2, extensions: 3 },
  "inference.ModelMetadataRequest": { name: 1, version: 2 },
  "inference.ModelMetadataResponse": { name: 1, versions: 2, platform: 3, inputs: 4, outputs: 5 },
  "inference.ModelMetadataResponse.TensorMetadata": { name: 1, datatype: 2, shape: 3 },
  "inference.ModelConfigRequest": { name: 1, version: 2 },
  "inference.ModelConfigResponse": { config: 1 },
  "inference.ModelStatisticsRequest": { name: 1, version: 2 },
  "inference.ModelStatisticsResponse": { model_stats: 1 },
  "inference.StatisticDuration": { count: 1, ns: 2 },
  "inference.InferStatistics": {
    success: 1,
    fail: 2,
    queue: 3,
    compute_input: 4,
    compute_infer: 5,
    compute_output: 6,
    cache_hit: 7,
    cache_miss: 8,
  },
  "inference.InferBatchStatistics": { batch_size: 1, compute_input: 2, compute_infer: 3, compute_output: 4 },
  "inference.InferResponseStatistics": {
    compute_infer: 1,
    compute_output: 2,
    success: 3,
    fail: 4,
    empty_response: 5,
    cancel: 6,
  },
  "inference.MemoryUsage": { type: 1, id: 2, byte_size: 3 },
  "inference.ModelStatistics": {
    name: 1,
    version: 2,
    last_inference: 3,
    inference_count: 4,
    execution_count: 5,
    inference_stats: 6,
    batch_stats: 7,
    memory_usage: 8,
    response_stats: 9,
  },
  "inference.ModelRepositoryParameter": { bool_param: 1, int64_param: 2, string_param: 3, bytes_param: 4 },
  "inference.RepositoryIndexRequest": { repository_name: 1, ready: 2 },
  "inference.RepositoryIndexResponse": { models: 1 },
  "inference.RepositoryIndexResponse.ModelIndex": { name: 1, version: 2, state: 3, reason: 4 },
  "inference.RepositoryModelLoadRequest": { repository_name: 1, model_name: 2, parameters: 3 },
  "inference.RepositoryModelUnloadRequest": { repository_name: 1, model_name: 2, parameters: 3 },
  "grpc.health.v1.HealthCheckRequest": { service: 1 },
  "grpc.health.v1.HealthCheckResponse": { status: 1 },
};

test("message fields carry the official names and numbers", () => {
  for (const [message, fields] of Object.entries(EXPECTED)) {
    const type = root.lookupType(message);
    for (const [field, id] of Object.entries(fields)) {
      assert.equal(type.fields[field]?.id, id, `${message}.${field}`);
    }
  }
});

test("key field types match the official proto", () => {
  const request = root.lookupType("inference.ModelInferRequest");
  assert.equal(request.fields.raw_input_contents?.type, "bytes");
  assert.equal(request.fields.raw_input_contents?.repeated, true);
  const input = root.lookupType("inference.ModelInferRequest.InferInputTensor");
  assert.equal(input.fields.shape?.type, "int64");
  const parameter = root.lookupType("inference.InferParameter");
  assert.deepEqual(parameter.oneofs.parameter_choice?.oneof, [
    "bool_param",
    "int64_param",
    "string_param",
    "double_param",
    "uint64_param",
  ]);
  assert.equal(parameter.fields.int64_param?.type, "int64");
  assert.equal(parameter.fields.uint64_param?.type, "uint64");
  const contents = root.lookupType("inference.InferTensorContents");
  assert.equal(contents.fields.int_contents?.type, "int32");
  assert.equal(contents.fields.uint_contents?.type, "uint32");
  assert.equal(contents.fields.fp32_contents?.type, "float");
  assert.equal(root.lookupType("inference.ModelConfigResponse").fields.config?.type, "ModelConfig");
  const status = root.lookupEnum("grpc.health.v1.HealthCheckResponse.ServingStatus");
  assert.deepEqual({ ...status.values }, { UNKNOWN: 0, SERVING: 1, NOT_SERVING: 2, SERVICE_UNKNOWN: 3 });
});

test("the services declare every RPC with its streaming kind", () => {
  const service = root.lookupService("inference.GRPCInferenceService");
  const methods = Object.fromEntries(
    Object.values(service.methods).map((m) => [
      m.name,
      `${m.requestStream ? "stream " : ""}${m.requestType}`,
    ]),
  );
  for (const name of [
    "ServerLive",
    "ServerReady",
    "ModelReady",
    "ServerMetadata",
    "ModelMetadata",
    "ModelInfer",
    "ModelConfig",
    "ModelStatistics",
    "RepositoryIndex",
    "RepositoryModelLoad",
    "RepositoryModelUnload",
    "SystemSharedMemoryStatus",
    "SystemSharedMemoryRegister",
    "SystemSharedMemoryUnregister",
    "CudaSharedMemoryStatus",
    "CudaSharedMemoryRegister",
    "CudaSharedMemoryUnregister",
    "TraceSetting",
    "LogSettings",
  ]) {
    assert.ok(methods[name] !== undefined, name);
    assert.ok(!methods[name]?.startsWith("stream"), `${name} is unary`);
  }
  const stream = service.methods.ModelStreamInfer;
  assert.equal(stream?.requestStream, true);
  assert.equal(stream?.responseStream, true);
  assert.equal(stream?.requestType, "ModelInferRequest");
  assert.equal(stream?.responseType, "ModelStreamInferResponse");
  const health = root.lookupService("grpc.health.v1.Health");
  assert.ok(health.methods.Check);
  assert.equal(health.methods.Watch?.responseStream, true);
});
