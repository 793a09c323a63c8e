import { ERROR_CODES, type ErrorCode, invalidArg, notFound, ServerError } from "../../../src/core/errors.ts";
import type { InferRequest, InferResponse, NamedTensor, SequenceId } from "../../../src/core/infer.ts";
import type {
  ModelLoadOptions,
  ModelMetadata,
  ModelRegistry,
  RepositoryIndexEntry,
  ServedModel,
  ServerContext,
  TensorMetadata,
} from "../../../src/core/model.ts";
import type { InputConfig, ModelConfig } from "../../../src/core/model-config.ts";
import { ModelStatistics, type ModelStatisticsSnapshot } from "../../../src/core/statistics.ts";
import type { Tensor } from "../../../src/core/tensor.ts";

// A ServerContext with hand-made models, standing in for the real registry: each model
// exercises one behaviour of the gRPC frontend.
//   echo        returns every input as an output of the same name (any datatype)
//   recorder    records requests; answers with the request's parameters (and a
//               server-assigned sequence id 2^64-1 for a start without an id)
//   fail        fails with the ServerError code named by its `code` string parameter
//   slow        holds every request until released; a request whose signal aborts fails
//               with CANCELLED, as the core does
//   accumulate  a stateful model: per sequence, a running sum of INPUT (INT32), answered
//               in arrival order per sequence with random delays in between

export const UINT64_MAX = (1n << 64n) - 1n;

const isErrorCode = (value: unknown): value is ErrorCode =>
  typeof value === "string" && (ERROR_CODES as readonly string[]).includes(value);

function config(name: string, inputs: readonly InputConfig[] = []): ModelConfig {
  return {
    name,
    platform: "onnxruntime_onnx",
    backend: "onnxruntime",
    versionPolicy: { kind: "latest", numVersions: 1 },
    maxBatchSize: 0,
    inputs,
    outputs: [],
    instanceGroups: [{ name: `${name}_0`, count: 1, kind: "KIND_CPU" }],
    defaultModelFilename: "model.onnx",
    parameters: {},
    warmup: [],
  };
}

abstract class FakeModel implements ServedModel {
  readonly name: string;
  readonly version = "1";
  readonly config: ModelConfig;
  readonly inputs: readonly TensorMetadata[];
  readonly outputs: readonly TensorMetadata[];
  readonly sequences = undefined;
  readonly stats: ModelStatistics;

  constructor(
    name: string,
    inputs: readonly TensorMetadata[] = [],
    outputs: readonly TensorMetadata[] = [],
    configInputs: readonly InputConfig[] = [],
  ) {
    this.name = name;
    this.config = config(name, configInputs);
    this.inputs = inputs;
    this.outputs = outputs;
    this.stats = new ModelStatistics(name, this.version);
  }

  #pending = 0;

  /** Requests accepted and not yet answered. */
  get pending(): number {
    return this.#pending;
  }

  /** A fake runs each request as it takes it. */
  get running(): number {
    return this.#pending;
  }

  infer(request: InferRequest): Promise<InferResponse> {
    this.#pending++;
    let running: Promise<InferResponse>;
    try {
      running = this.run(request);
    } catch (error) {
      running = Promise.reject(error);
    }
    return running.finally(() => this.#pending--);
  }

  protected abstract run(request: InferRequest): Promise<InferResponse>;

  statistics(): ModelStatisticsSnapshot {
    return this.stats.snapshot();
  }

  protected respond(request: InferRequest, outputs: NamedTensor[], parameters = {}): InferResponse {
    return { modelName: this.name, modelVersion: this.version, id: request.id, parameters, outputs };
  }
}

class EchoModel extends FakeModel {
  constructor() {
    super(
      "echo",
      [{ name: "INPUT0", datatype: "FP32", shape: [-1, 16] }],
      [{ name: "INPUT0", datatype: "FP32", shape: [-1, 16] }],
    );
  }

  protected async run(request: InferRequest): Promise<InferResponse> {
    const names = request.outputs ?? [...request.inputs.keys()];
    const outputs = names.map((name): NamedTensor => {
      const tensor: Tensor | undefined = request.inputs.get(name);
      if (tensor === undefined) throw invalidArg(`unexpected inference output '${name}' for model 'echo'`);
      return { name, datatype: tensor.datatype, shape: tensor.shape, data: tensor.data };
    });
    this.stats.recordSuccess(
      {
        queueNs: 1,
        computeInputNs: 2,
        computeInferNs: 3,
        computeOutputNs: 4,
        totalNs: 10,
        batchSize: 1,
      },
      1,
    );
    this.stats.recordExecution(1, 2, 3, 4);
    return this.respond(request, outputs);
  }
}

/**
 * A model whose config declares its inputs (name, datatype, dims): requests to it meet
 * a model's checks, where the other fakes take any input. It runs nothing.
 */
export class DeclaredModel extends FakeModel {
  constructor(name: string, inputs: readonly [string, InputConfig["datatype"], number[]][]) {
    super(
      name,
      [],
      [],
      inputs.map(([input, datatype, dims]) => ({
        name: input,
        datatype,
        dims,
        optional: false,
        allowRaggedBatch: false,
        shared: false,
      })),
    );
  }

  protected run(): Promise<InferResponse> {
    return Promise.reject(new Error("a declared model runs nothing"));
  }
}

export class RecorderModel extends FakeModel {
  readonly requests: InferRequest[] = [];

  constructor() {
    super("recorder");
  }

  protected async run(request: InferRequest): Promise<InferResponse> {
    this.requests.push(request);
    const parameters: Record<string, InferRequest["parameters"][string]> = { ...request.parameters };
    if (request.sequence?.start && request.sequence.id === undefined) parameters.sequence_id = UINT64_MAX;
    return this.respond(request, [], parameters);
  }
}

class FailModel extends FakeModel {
  constructor() {
    super("fail");
  }

  protected async run(request: InferRequest): Promise<InferResponse> {
    const code = request.parameters.code;
    if (!isErrorCode(code)) throw invalidArg("the fail model needs a 'code' string parameter");
    throw new ServerError(
      code,
      `failing as asked with ${code}`,
      code === "UNAVAILABLE" ? { retryAfterSeconds: 2 } : {},
    );
  }
}

export interface HeldRequest {
  readonly request: InferRequest;
  /** Set when the request's signal aborted before it was released. */
  aborted: boolean;
  release(): void;
}

export class SlowModel extends FakeModel {
  readonly held: HeldRequest[] = [];
  #waiters: Array<() => void> = [];

  constructor() {
    super("slow");
  }

  protected run(request: InferRequest): Promise<InferResponse> {
    return new Promise((resolve, reject) => {
      const held: HeldRequest = {
        request,
        aborted: false,
        release: () => {
          request.signal?.removeEventListener("abort", onAbort);
          resolve(this.respond(request, []));
        },
      };
      const onAbort = (): void => {
        held.aborted = true;
        reject(new ServerError("CANCELLED", "request cancelled before it ran"));
      };
      request.signal?.addEventListener("abort", onAbort, { once: true });
      this.held.push(held);
      for (const wake of this.#waiters.splice(0)) wake();
    });
  }

  /** Resolves once at least `count` requests have arrived. */
  async waitForHeld(count: number): Promise<void> {
    while (this.held.length < count) await new Promise<void>((wake) => this.#waiters.push(wake));
  }

  releaseAll(): void {
    for (const held of this.held.splice(0)) held.release();
  }
}

class AccumulateModel extends FakeModel {
  readonly #sums = new Map<SequenceId, number>();
  readonly #chains = new Map<SequenceId, Promise<unknown>>();

  constructor() {
    super("accumulate");
  }

  protected run(request: InferRequest): Promise<InferResponse> {
    const sequence = request.sequence;
    if (sequence?.id === undefined) return Promise.reject(invalidArg("accumulate needs a sequence id"));
    const id = sequence.id;
    if (!sequence.start && !this.#sums.has(id)) {
      return Promise.reject(
        invalidArg(`inference request for sequence ${id} to model 'accumulate' must specify the START flag`),
      );
    }
    if (sequence.start) this.#sums.set(id, 0);
    const input = request.inputs.get("INPUT");
    const value = input === undefined ? 0 : ((input.data as Int32Array)[0] ?? 0);
    // Requests of one sequence run in arrival order, each after a random pause.
    const previous = this.#chains.get(id) ?? Promise.resolve();
    const run = previous.then(async () => {
      for (let i = Math.floor(Math.random() * 4); i > 0; i--) await new Promise((r) => setImmediate(r));
      const sum = (this.#sums.get(id) ?? 0) + value;
      this.#sums.set(id, sum);
      if (sequence.end) this.#sums.delete(id);
      return this.respond(request, [
        { name: "SUM", datatype: "INT32", shape: [1], data: Int32Array.of(sum) },
      ]);
    });
    this.#chains.set(id, run);
    return run;
  }
}

export class FakeRegistry implements ModelRegistry {
  readonly recorder = new RecorderModel();
  readonly slow = new SlowModel();
  readonly models = new Map<string, FakeModel>();
  readonly loads: Array<{ name: string; config: string | undefined; files?: string[] }> = [];
  readonly unloads: string[] = [];

  constructor() {
    for (const model of [new EchoModel(), this.recorder, new FailModel(), this.slow, new AccumulateModel()]) {
      this.models.set(model.name, model);
    }
  }

  model(name: string, version?: string): ServedModel {
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
    return {
      name: model.name,
      platform: "onnxruntime_onnx",
      max_batch_size: 8,
      input: [{ name: "INPUT0", data_type: "TYPE_FP32", dims: ["16"] }],
      output: [{ name: "OUTPUT0", data_type: "TYPE_FP32", dims: ["-1", "16"] }],
      sequence_batching: {
        max_sequence_idle_microseconds: "18446744073709551615",
        control_input: [
          { name: "START", control: [{ kind: "CONTROL_SEQUENCE_START", int32_false_true: [0, 1] }] },
        ],
        oldest: { max_candidate_sequences: 4, preferred_batch_size: [2, 4] },
      },
      instance_group: [{ name: `${model.name}_0`, count: 2, kind: "KIND_CPU" }],
      parameters: { state_pairs: { string_value: "<<<h_in, h_out>>>" } },
    };
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
    }));
    if (!readyOnly)
      entries.push({ name: "broken", version: "1", state: "UNAVAILABLE", reason: "no model file" });
    return entries;
  }

  async load(name: string, options?: ModelLoadOptions): Promise<void> {
    if (name === "missing") throw notFound(`failed to load 'missing', no version is available`);
    const files = options?.files;
    this.loads.push({
      name,
      config: options?.config,
      ...(files === undefined
        ? {}
        : { files: [...files].map(([path, bytes]) => `${path}:${Buffer.from(bytes)}`) }),
    });
  }

  async unload(name: string): Promise<void> {
    if (!this.models.has(name)) throw notFound(`failed to unload '${name}', no such model`);
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

export class FakeContext implements ServerContext {
  readonly registry = new FakeRegistry();
  readonly metadata = { name: "seqserve", version: "0.1.0", extensions: ["sequence", "statistics"] };
  live = true;
  ready = true;

  isLive(): boolean {
    return this.live;
  }

  isReady(): boolean {
    return this.ready;
  }
}
