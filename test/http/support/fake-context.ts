import { cancelled, type ErrorCode, notFound, ServerError } from "../../../src/core/errors.ts";
import type {
  InferRequest,
  InferResponse,
  NamedTensor,
  Parameters,
  SequenceId,
} from "../../../src/core/infer.ts";
import type {
  ModelLoadOptions,
  ModelMetadata,
  ModelRegistry,
  RepositoryIndexEntry,
  SequenceAdmin,
  SequenceEndReason,
  SequenceInfo,
  SequenceLookup,
  SequenceSummary,
  ServedModel,
  ServerContext,
  ServerMetadata,
  TensorMetadata,
} from "../../../src/core/model.ts";
import type { InputConfig, ModelConfig } from "../../../src/core/model-config.ts";
import { ModelStatistics, type ModelStatisticsSnapshot } from "../../../src/core/statistics.ts";

// A ServerContext with fake models, for driving the HTTP frontend without the real
// registry, schedulers or backends. Swapping in the real ones needs only another context.

type InferFunction = (request: InferRequest, model: FakeModel) => Promise<InferResponse> | InferResponse;

export interface FakeModelOptions {
  readonly name: string;
  readonly version?: string;
  readonly config?: Partial<ModelConfig>;
  readonly inputs?: readonly TensorMetadata[];
  readonly outputs?: readonly TensorMetadata[];
  readonly sequences?: SequenceAdmin;
  readonly infer: InferFunction;
}

export function modelConfig(name: string, partial: Partial<ModelConfig> = {}): ModelConfig {
  return {
    name,
    platform: "onnxruntime_onnx",
    backend: "onnxruntime",
    versionPolicy: { kind: "latest", numVersions: 1 },
    maxBatchSize: 0,
    inputs: [],
    outputs: [],
    instanceGroups: [{ name: `${name}_0`, count: 1, kind: "KIND_CPU" }],
    defaultModelFilename: "model.onnx",
    parameters: {},
    warmup: [],
    ...partial,
  };
}

export function inputConfig(name: string, datatype: InputConfig["datatype"], dims: number[]): InputConfig {
  return { name, datatype, dims, optional: false, allowRaggedBatch: false, shared: false };
}

export class FakeModel implements ServedModel {
  readonly name: string;
  readonly version: string;
  readonly config: ModelConfig;
  readonly inputs: readonly TensorMetadata[];
  readonly outputs: readonly TensorMetadata[];
  readonly sequences: SequenceAdmin | undefined;
  readonly pending = 0;
  readonly running = 0;
  /** Every request this model was asked to run, in order. */
  readonly requests: InferRequest[] = [];
  readonly #infer: InferFunction;
  readonly #statistics: ModelStatistics;

  constructor(options: FakeModelOptions) {
    this.name = options.name;
    this.version = options.version ?? "1";
    this.config = modelConfig(options.name, options.config);
    this.inputs = options.inputs ?? [];
    this.outputs = options.outputs ?? [];
    this.sequences = options.sequences;
    this.#infer = options.infer;
    this.#statistics = new ModelStatistics(this.name, this.version);
  }

  async infer(request: InferRequest): Promise<InferResponse> {
    this.requests.push(request);
    const response = await this.#infer(request, this);
    this.#statistics.recordSuccess(
      {
        queueNs: 1000,
        computeInputNs: 2000,
        computeInferNs: 3000,
        computeOutputNs: 4000,
        totalNs: 10000,
        batchSize: 1,
      },
      1,
    );
    return response;
  }

  statistics(): ModelStatisticsSnapshot {
    return this.#statistics.snapshot();
  }
}

/** The response parameters echo the request's sequence id, as a sequence model would. */
function sequenceParameters(request: InferRequest): Parameters {
  const id = request.sequence?.id;
  return id === undefined ? {} : { sequence_id: id };
}

function respond(model: FakeModel, request: InferRequest, outputs: NamedTensor[]): InferResponse {
  return {
    modelName: model.name,
    modelVersion: model.version,
    id: request.id,
    parameters: sequenceParameters(request),
    outputs,
  };
}

/** Every input comes back as the output of the same name (filtered by the requested outputs). */
const echo: InferFunction = (request, model) => {
  const outputs: NamedTensor[] = [];
  for (const [name, tensor] of request.inputs) {
    if (request.outputs !== undefined && !request.outputs.includes(name)) continue;
    outputs.push({ name, ...tensor });
  }
  return respond(model, request, outputs);
};

/** A live sequence as a fake admin lists it: a fresh one, unless `seen` says otherwise. */
export function sequenceInfo(id: SequenceId, seen: Partial<SequenceInfo> = {}): SequenceInfo {
  return {
    id,
    status: "active",
    ageMs: 0,
    idleMs: 0,
    steps: 0,
    queued: 0,
    stateBytes: 0,
    instance: undefined,
    slot: undefined,
    expiresAtMs: undefined,
    ...seen,
  };
}

export class FakeSequenceAdmin implements SequenceAdmin {
  readonly #live = new Map<string, SequenceInfo>();
  readonly ended: SequenceId[] = [];

  constructor(ids: readonly SequenceId[]) {
    for (const id of ids) this.open(id, { ageMs: 1500, idleMs: 20, steps: 7, stateBytes: 1024 });
  }

  #key(id: SequenceId): string {
    return typeof id === "bigint" ? `n${id}` : `s${id}`;
  }

  list(): SequenceInfo[] {
    return [...this.#live.values()];
  }

  summary(): SequenceSummary {
    const ended = {} as Record<SequenceEndReason, number>;
    for (const reason of [
      "end",
      "timeout",
      "restart",
      "forced",
      "cancelled",
      "backlog_timeout",
      "evicted",
      "shutdown",
      "expired",
    ]) {
      ended[reason as SequenceEndReason] = 0;
    }
    ended.forced = this.ended.length;
    return {
      live: this.#live.size,
      backlog: 0,
      stateBytes: this.#live.size * 1024,
      stateAllocatedBytes: this.#live.size * 1024,
      ended,
    };
  }

  end(id: SequenceId): boolean {
    if (!this.#live.delete(this.#key(id))) return false;
    this.ended.push(id);
    return true;
  }

  open(id: SequenceId, seen: Partial<SequenceInfo> = {}): void {
    this.#live.set(
      this.#key(id),
      sequenceInfo(id, { instance: "stateful_0", slot: this.#live.size, ...seen }),
    );
  }

  close(id: SequenceId): boolean {
    return this.end(id);
  }

  /** Every id is one this fake takes. */
  checkId(_id: SequenceId): void {}

  checkCaller(_id: SequenceId, _principal: string | undefined): void {}

  lookup(id: SequenceId): SequenceLookup {
    if (this.#live.has(this.#key(id))) return { kind: "live", expiresAtMs: undefined };
    return this.ended.includes(id) ? { kind: "ended", reason: "forced", endedAtMs: 0 } : { kind: "unknown" };
  }
}

/** Resolves when the model `hang` sees its request aborted. */
export interface AbortProbe {
  readonly aborted: Promise<InferRequest>;
  readonly started: Promise<void>;
}

function hangingModel(): { model: FakeModel; probe: AbortProbe } {
  let onAbort!: (request: InferRequest) => void;
  let onStart!: () => void;
  const probe: AbortProbe = {
    aborted: new Promise((resolve) => (onAbort = resolve)),
    started: new Promise((resolve) => (onStart = resolve)),
  };
  const model = new FakeModel({
    name: "hang",
    infer: (request) =>
      new Promise<InferResponse>((_resolve, reject) => {
        onStart();
        const signal = request.signal;
        const abort = (): void => {
          onAbort(request);
          reject(cancelled());
        };
        if (signal === undefined) return;
        if (signal.aborted) abort();
        else signal.addEventListener("abort", abort, { once: true });
      }),
  });
  return { model, probe };
}

export class FakeRegistry implements ModelRegistry {
  readonly models = new Map<string, FakeModel>();
  readonly loads: { name: string; config: string | undefined; files?: string[] }[] = [];
  readonly unloads: string[] = [];

  add(model: FakeModel): FakeModel {
    this.models.set(model.name, model);
    return model;
  }

  model(name: string, version?: string): FakeModel {
    const model = this.models.get(name);
    if (model === undefined || (version !== undefined && version !== model.version)) {
      const which = version === undefined ? "" : ` version ${version}`;
      throw notFound(`Request for unknown model: '${name}'${which} is not found`);
    }
    return model;
  }

  metadata(name: string, version?: string): ModelMetadata {
    const model = this.model(name, version);
    return {
      name: model.name,
      versions: [model.version],
      platform: model.config.platform,
      inputs: model.inputs,
      outputs: model.outputs,
    };
  }

  configJson(name: string, version?: string): Record<string, unknown> {
    const model = this.model(name, version);
    return { name: model.name, platform: model.config.platform, max_batch_size: model.config.maxBatchSize };
  }

  isReady(name: string, version?: string): boolean {
    const model = this.models.get(name);
    return model !== undefined && (version === undefined || version === model.version);
  }

  index(readyOnly = false): RepositoryIndexEntry[] {
    const entries: RepositoryIndexEntry[] = [...this.models.values()].map((m) => ({
      name: m.name,
      version: m.version,
      state: "READY",
      reason: "",
    }));
    if (!readyOnly)
      entries.push({ name: "broken", version: "1", state: "UNAVAILABLE", reason: "failed to load" });
    return entries;
  }

  async load(name: string, options: ModelLoadOptions = {}): Promise<void> {
    if (name === "broken") throw new ServerError("INVALID_ARG", "failed to load 'broken': no model file");
    const files = options.files;
    this.loads.push({
      name,
      config: options.config,
      ...(files === undefined
        ? {}
        : { files: [...files].map(([path, bytes]) => `${path}:${Buffer.from(bytes)}`) }),
    });
  }

  async unload(name: string): Promise<void> {
    if (!this.models.has(name)) throw notFound(`failed to unload '${name}', no version is available`);
    this.unloads.push(name);
  }

  statistics(name?: string, version?: string): ModelStatisticsSnapshot[] {
    if (name === undefined) return [...this.models.values()].map((m) => m.statistics());
    return [this.model(name, version).statistics()];
  }

  served(): ServedModel[] {
    return [...this.models.values()];
  }
}

export interface FakeServer {
  readonly context: ServerContext;
  readonly registry: FakeRegistry;
  readonly health: { live: boolean; ready: boolean };
  readonly hang: AbortProbe;
  readonly sequences: FakeSequenceAdmin;
}

export const SERVER_METADATA: ServerMetadata = {
  name: "seqserve",
  version: "0.1.0",
  extensions: ["binary_tensor_data", "sequence", "statistics", "model_repository", "parameters"],
};

/** The fake server's models, by what they do. */
export function fakeServer(): FakeServer {
  const registry = new FakeRegistry();
  registry.add(new FakeModel({ name: "echo", infer: echo }));
  registry.add(new FakeModel({ name: "versioned", version: "3", infer: echo }));
  registry.add(new FakeModel({ name: "recorder", infer: (request, model) => respond(model, request, []) }));
  registry.add(
    new FakeModel({
      name: "error",
      infer: (request) => {
        const code = request.parameters.code as ErrorCode;
        const retry = request.parameters.retry_after;
        throw new ServerError(
          code,
          `model failed with ${code}`,
          typeof retry === "number" ? { retryAfterSeconds: retry } : {},
        );
      },
    }),
  );
  registry.add(
    new FakeModel({
      name: "crash",
      infer: () => {
        throw new TypeError("something broke inside");
      },
    }),
  );
  registry.add(
    new FakeModel({
      name: "half",
      inputs: [{ name: "INPUT0", datatype: "FP16", shape: [-1] }],
      outputs: [
        { name: "OUTPUT0", datatype: "FP16", shape: [-1] },
        { name: "OUTPUT1", datatype: "FP32", shape: [-1] },
      ],
      infer: (request, model) => {
        const input = request.inputs.get("INPUT0");
        const outputs: NamedTensor[] = [];
        if (input !== undefined && request.outputs?.includes("OUTPUT1") !== true)
          outputs.push({ name: "OUTPUT0", ...input });
        return respond(model, request, outputs);
      },
    }),
  );
  registry.add(
    new FakeModel({
      name: "raw_fp32",
      config: { maxBatchSize: 8, inputs: [inputConfig("INPUT0", "FP32", [-1])] },
      infer: echo,
    }),
  );
  registry.add(
    new FakeModel({
      name: "raw_fixed",
      config: { maxBatchSize: 0, inputs: [inputConfig("INPUT0", "INT16", [2, 3])] },
      infer: echo,
    }),
  );
  registry.add(
    new FakeModel({
      name: "raw_bytes",
      config: { inputs: [inputConfig("TEXT", "BYTES", [1])] },
      infer: echo,
    }),
  );
  registry.add(
    new FakeModel({
      name: "raw_two",
      config: { inputs: [inputConfig("A", "FP32", [1]), inputConfig("B", "FP32", [1])] },
      infer: echo,
    }),
  );
  registry.add(
    new FakeModel({
      name: "raw_two_var",
      config: { inputs: [inputConfig("A", "FP32", [-1, -1])] },
      infer: echo,
    }),
  );
  const sequences = new FakeSequenceAdmin([18446744073709551615n, 9007199254740993n, "session-a", "123"]);
  registry.add(new FakeModel({ name: "stateful", sequences, infer: echo }));
  const { model, probe } = hangingModel();
  registry.add(model);

  const health = { live: true, ready: true };
  const context: ServerContext = {
    registry,
    metadata: SERVER_METADATA,
    isLive: () => health.live,
    isReady: () => health.ready,
  };
  return { context, registry, health, hang: probe, sequences };
}
