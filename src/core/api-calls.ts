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

/** How OVMS's metrics treat one of the calls they count per model. */
export interface CountedCall {
  /** Its series carry the version that answered (not readiness and status, about the model as a whole). */
  readonly versioned: boolean;
  /** Its processing time is observed (inference calls). */
  readonly timed: boolean;
}

/** The calls OVMS's metrics count per model, by API family, over REST and gRPC alike. */
export const COUNTED_CALLS = {
  KServe: {
    ModelInfer: { versioned: true, timed: true },
    ModelMetadata: { versioned: true, timed: false },
    ModelReady: { versioned: false, timed: false },
  },
  TensorFlowServing: {
    Predict: { versioned: true, timed: true },
    GetModelMetadata: { versioned: true, timed: false },
    GetModelStatus: { versioned: false, timed: false },
  },
} as const satisfies Record<string, Record<string, CountedCall>>;

export type CountedApi = keyof typeof COUNTED_CALLS;
