import assert from "node:assert/strict";
import { test } from "node:test";
import { tfsTypes } from "../../src/frontends/tfs/proto-definitions.ts";

// TF-Serving's and TensorFlow's field numbers, types and enum values are the wire contract
// with every TF-Serving / OVMS client (tensorflow's make_tensor_proto, the
// tensorflow-serving-api stubs): checked here against the values of TensorFlow's and
// TF-Serving's own descriptors.

type Field = readonly [number, string, "repeated" | "single"];

const EXPECTED: Record<string, Record<string, Field>> = {
  "tensorflow.TensorProto": {
    dtype: [1, "DataType", "single"],
    tensor_shape: [2, "TensorShapeProto", "single"],
    version_number: [3, "int32", "single"],
    tensor_content: [4, "bytes", "single"],
    half_val: [13, "int32", "repeated"],
    float_val: [5, "float", "repeated"],
    double_val: [6, "double", "repeated"],
    int_val: [7, "int32", "repeated"],
    string_val: [8, "bytes", "repeated"],
    scomplex_val: [9, "float", "repeated"],
    int64_val: [10, "int64", "repeated"],
    bool_val: [11, "bool", "repeated"],
    dcomplex_val: [12, "double", "repeated"],
    resource_handle_val: [14, "ResourceHandleProto", "repeated"],
    variant_val: [15, "VariantTensorDataProto", "repeated"],
    uint32_val: [16, "uint32", "repeated"],
    uint64_val: [17, "uint64", "repeated"],
    float8_val: [18, "bytes", "single"],
  },
  "tensorflow.TensorShapeProto": { dim: [2, "Dim", "repeated"], unknown_rank: [3, "bool", "single"] },
  "tensorflow.TensorShapeProto.Dim": { size: [1, "int64", "single"], name: [2, "string", "single"] },
  "tensorflow.TensorInfo": {
    name: [1, "string", "single"],
    coo_sparse: [4, "CooSparse", "single"],
    dtype: [2, "DataType", "single"],
    tensor_shape: [3, "TensorShapeProto", "single"],
  },
  "tensorflow.SignatureDef": {
    inputs: [1, "TensorInfo", "single"],
    outputs: [2, "TensorInfo", "single"],
    method_name: [3, "string", "single"],
    defaults: [4, "TensorProto", "single"],
  },
  "tensorflow.serving.ModelSpec": {
    name: [1, "string", "single"],
    version: [2, "google.protobuf.Int64Value", "single"],
    version_label: [4, "string", "single"],
    signature_name: [3, "string", "single"],
  },
  "tensorflow.serving.PredictRequest": {
    model_spec: [1, "ModelSpec", "single"],
    inputs: [2, "TensorProto", "single"],
    output_filter: [3, "string", "repeated"],
    predict_streamed_options: [5, "PredictStreamedOptions", "single"],
    client_id: [6, "bytes", "single"],
    request_options: [7, "RequestOptions", "single"],
  },
  "tensorflow.serving.PredictResponse": {
    model_spec: [2, "ModelSpec", "single"],
    outputs: [1, "TensorProto", "single"],
  },
  "tensorflow.serving.SignatureDefMap": { signature_def: [1, "SignatureDef", "single"] },
  "tensorflow.serving.GetModelMetadataRequest": {
    model_spec: [1, "ModelSpec", "single"],
    metadata_field: [2, "string", "repeated"],
  },
  "tensorflow.serving.GetModelMetadataResponse": {
    model_spec: [1, "ModelSpec", "single"],
    metadata: [2, "google.protobuf.Any", "single"],
  },
  "tensorflow.serving.GetModelStatusRequest": { model_spec: [1, "ModelSpec", "single"] },
  "tensorflow.serving.ModelVersionStatus": {
    version: [1, "int64", "single"],
    state: [2, "State", "single"],
    status: [3, "StatusProto", "single"],
  },
  "tensorflow.serving.GetModelStatusResponse": {
    model_version_status: [1, "ModelVersionStatus", "repeated"],
  },
  "tensorflow.serving.StatusProto": {
    error_code: [1, "tensorflow.error.Code", "single"],
    error_message: [2, "string", "single"],
  },
  "tensorflow.serving.ReloadConfigRequest": {
    config: [1, "ModelServerConfig", "single"],
    metric_names: [2, "string", "repeated"],
  },
  "tensorflow.serving.ReloadConfigResponse": {
    status: [1, "StatusProto", "single"],
    metric: [2, "Metric", "repeated"],
  },
  "tensorflow.serving.Metric": {
    name: [1, "string", "single"],
    int64_value_increase: [2, "int64", "single"],
  },
  "tensorflow.serving.ModelServerConfig": {
    model_config_list: [1, "ModelConfigList", "single"],
    custom_model_config: [2, "google.protobuf.Any", "single"],
  },
  "tensorflow.serving.ModelConfigList": { config: [1, "ModelConfig", "repeated"] },
  "tensorflow.serving.ModelConfig": {
    name: [1, "string", "single"],
    base_path: [2, "string", "single"],
    model_type: [3, "ModelType", "single"],
    model_platform: [4, "string", "single"],
    model_version_policy: [7, "FileSystemStoragePathSourceConfig.ServableVersionPolicy", "single"],
    version_labels: [8, "int64", "single"],
    logging_config: [6, "LoggingConfig", "single"],
  },
  "tensorflow.serving.FileSystemStoragePathSourceConfig.ServableVersionPolicy": {
    latest: [100, "Latest", "single"],
    all: [101, "All", "single"],
    specific: [102, "Specific", "single"],
  },
  "tensorflow.serving.FileSystemStoragePathSourceConfig.ServableVersionPolicy.Latest": {
    num_versions: [1, "uint32", "single"],
  },
  "tensorflow.serving.FileSystemStoragePathSourceConfig.ServableVersionPolicy.Specific": {
    versions: [1, "int64", "repeated"],
  },
  "tensorflow.serving.FileSystemStoragePathSourceConfig": {
    servables: [5, "ServableToMonitor", "repeated"],
    file_system_poll_wait_seconds: [3, "int64", "single"],
    fail_if_zero_versions_at_startup: [4, "bool", "single"],
    servable_versions_always_present: [6, "bool", "single"],
  },
  "tensorflow.serving.FileSystemStoragePathSourceConfig.ServableToMonitor": {
    servable_name: [1, "string", "single"],
    base_path: [2, "string", "single"],
    servable_version_policy: [
      4,
      "tensorflow.serving.FileSystemStoragePathSourceConfig.ServableVersionPolicy",
      "single",
    ],
  },
  "tensorflow.serving.LoggingConfig": {
    log_collector_config: [1, "LogCollectorConfig", "single"],
    sampling_config: [2, "SamplingConfig", "single"],
    custom_logging_config: [3, "google.protobuf.Any", "single"],
  },
  "tensorflow.serving.SamplingConfig": {
    sampling_rate: [1, "double", "single"],
    per_task_sampling_configs: [3, "PerTaskSamplingConfig", "repeated"],
    attributes: [2, "int32", "single"],
  },
  "tensorflow.serving.PerTaskSamplingConfig": {
    dc: [1, "string", "single"],
    task_index: [2, "int32", "single"],
    sampling_rate: [3, "double", "single"],
  },
  "tensorflow.serving.LogCollectorConfig": {
    type: [1, "string", "single"],
    filename_prefix: [2, "string", "single"],
  },
};

const ENUMS: Record<string, Record<string, number>> = {
  "tensorflow.DataType": {
    DT_INVALID: 0,
    DT_FLOAT: 1,
    DT_DOUBLE: 2,
    DT_INT32: 3,
    DT_UINT8: 4,
    DT_INT16: 5,
    DT_INT8: 6,
    DT_STRING: 7,
    DT_INT64: 9,
    DT_BOOL: 10,
    DT_BFLOAT16: 14,
    DT_UINT16: 17,
    DT_HALF: 19,
    DT_UINT32: 22,
    DT_UINT64: 23,
    DT_FLOAT_REF: 101,
  },
  "tensorflow.serving.ModelVersionStatus.State": {
    UNKNOWN: 0,
    START: 10,
    LOADING: 20,
    AVAILABLE: 30,
    UNLOADING: 40,
    END: 50,
  },
  "tensorflow.error.Code": { OK: 0, INVALID_ARGUMENT: 3, NOT_FOUND: 5, UNAVAILABLE: 14, UNKNOWN: 2 },
};

test("every field of the TF-Serving and TensorFlow messages has TensorFlow's number and type", () => {
  const root = tfsTypes();
  for (const [typeName, fields] of Object.entries(EXPECTED)) {
    const type = root.lookupType(typeName);
    for (const [name, [id, fieldType, rule]] of Object.entries(fields)) {
      const field = type.fields[name];
      assert.ok(field, `${typeName}.${name} exists`);
      assert.equal(field.id, id, `${typeName}.${name} number`);
      assert.equal(field.type, fieldType, `${typeName}.${name} type`);
      assert.equal(field.repeated, rule === "repeated", `${typeName}.${name} repeated`);
    }
    const extra = Object.keys(type.fields).filter((f) => !(f in fields));
    assert.deepEqual(extra, [], `${typeName} has no fields TensorFlow does not`);
  }
  for (const packed of ["half_val", "float_val", "int64_val", "uint64_val", "uint32_val"]) {
    assert.equal(root.lookupType("tensorflow.TensorProto").fields[packed]?.packed, true, `${packed} packed`);
  }
  for (const [enumName, values] of Object.entries(ENUMS)) {
    const found = root.lookupEnum(enumName).values;
    for (const [name, value] of Object.entries(values))
      assert.equal(found[name], value, `${enumName}.${name}`);
  }
  assert.deepEqual(Object.keys(root.lookupService("tensorflow.serving.PredictionService").methods), [
    "Predict",
    "GetModelMetadata",
  ]);
  assert.deepEqual(Object.keys(root.lookupService("tensorflow.serving.ModelService").methods), [
    "GetModelStatus",
    "HandleReloadConfigRequest",
  ]);
});
