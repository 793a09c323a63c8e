// The calls OpenVINO Model Server's metrics count per model (ovms_requests_success / _fail
// and the request time), by API family and method: the frontends name their calls from
// it, and the OVMS metrics make a series for each.

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
