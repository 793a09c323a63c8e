// What a frontend tells about each call it answered for a model, for metrics counted per
// API and method (OpenVINO Model Server's ovms_requests_success / _fail and request time).
// The frontend names its API and transport; below it nothing knows them.

export interface ApiCall {
  /** The API family: "KServe", "TensorFlowServing". */
  readonly api: string;
  /** "REST" or "gRPC". */
  readonly transport: string;
  /** The call: "ModelInfer", "Predict", "GetModelMetadata"… */
  readonly method: string;
  readonly model: string;
  /** The version that answered; undefined for calls about the model as a whole (status, readiness). */
  readonly version: string | undefined;
  readonly ok: boolean;
  /** From the call's arrival to its answer, for inference calls. */
  readonly durationUs?: number;
}

export interface ApiCallRecorder {
  record(call: ApiCall): void;
}
