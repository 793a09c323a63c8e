import { cancelled, invalidArg, ServerError } from "../../../src/core/errors.ts";
import type { InferRequest, InferResponse, SequenceControl, SequenceId } from "../../../src/core/infer.ts";
import type {
  SequenceAdmin,
  SequenceEndReason,
  SequenceInfo,
  SequenceLookup,
  SequenceSummary,
} from "../../../src/core/model.ts";
import { formatSequenceId } from "../../../src/core/sequence/sequence-parameters.ts";
import { FakeModel, inputConfig, sequenceInfo } from "./fake-context.ts";

// A small stateful fake for the stream tests: each sequence keeps the running sum of the
// INT32 values it was sent and answers it as SUM. It checks the sequence fields the way
// the core's sequence batcher does (START to begin, a known id to continue, server-assigned
// ids on a start without one, END to finish), records every end with its reason, and can
// hold requests at a gate to keep them in flight. A request with `parameters.fail` fails
// before it touches its sequence, one with `parameters.step_fails` once admitted.

export interface SequenceEnd {
  readonly id: SequenceId;
  readonly reason: SequenceEndReason;
}

const key = (id: SequenceId): string => (typeof id === "bigint" ? `u${id}` : `s${id}`);

/** Holds the requests that reach it until released. */
export class Gate {
  #held = false;
  #waiters: (() => void)[] = [];

  get waiting(): number {
    return this.#waiters.length;
  }

  hold(): void {
    this.#held = true;
  }

  /** Lets every held request go, in arrival order (or reversed), and stops holding. */
  release(order: "arrival" | "reversed" = "arrival"): void {
    this.#held = false;
    const waiters = this.#waiters.splice(0);
    if (order === "reversed") waiters.reverse();
    for (const go of waiters) go();
  }

  pass(): Promise<void> | undefined {
    if (!this.#held) return undefined;
    return new Promise((resolve) => this.#waiters.push(resolve));
  }
}

export class RunningSums implements SequenceAdmin {
  readonly #sums = new Map<string, { id: SequenceId; sum: number }>();
  /** Every end, whatever its cause, in order. */
  readonly ends: SequenceEnd[] = [];
  /** Every call of `end` (the admin API), also those for unknown ids. */
  readonly endCalls: SequenceEnd[] = [];
  #nextId = 1n << 62n;
  /** The id the last start without one was given. */
  lastAssigned: SequenceId | undefined;

  has(id: SequenceId): boolean {
    return this.#sums.has(key(id));
  }

  list(): SequenceInfo[] {
    return [...this.#sums.values()].map(({ id }) =>
      sequenceInfo(id, { stateBytes: 4, instance: "running_sum_0", slot: 0 }),
    );
  }

  summary(): SequenceSummary {
    const ended = {} as Record<SequenceEndReason, number>;
    for (const end of this.ends) ended[end.reason] = (ended[end.reason] ?? 0) + 1;
    return {
      live: this.#sums.size,
      backlog: 0,
      stateBytes: this.#sums.size * 4,
      stateAllocatedBytes: this.#sums.size * 4,
      ended,
    };
  }

  end(id: SequenceId, reason: SequenceEndReason = "forced"): boolean {
    this.endCalls.push({ id, reason });
    return this.#finish(id, reason);
  }

  open(id: SequenceId): void {
    if (this.has(id)) throw new ServerError("ALREADY_EXISTS", `sequence ${formatSequenceId(id)} is live`);
    this.#sums.set(key(id), { id, sum: 0 });
  }

  close(id: SequenceId): boolean {
    return this.#finish(id, "end");
  }

  /** Every id is one this fake takes. */
  checkId(_id: SequenceId): void {}

  checkCaller(_id: SequenceId, _principal: string | undefined): void {}

  lookup(id: SequenceId): SequenceLookup {
    if (this.has(id)) return { kind: "live", expiresAtMs: undefined };
    const end = this.ends.findLast((e) => key(e.id) === key(id));
    return end === undefined ? { kind: "unknown" } : { kind: "ended", reason: end.reason, endedAtMs: 0 };
  }

  #finish(id: SequenceId, reason: SequenceEndReason): boolean {
    if (!this.#sums.delete(key(id))) return false;
    this.ends.push({ id, reason });
    return true;
  }

  /** Admission, as the core does it before queueing: returns the sequence's id. */
  admit(request: InferRequest, model: string): { id: SequenceId; assigned: boolean } {
    const control = request.sequence;
    if (control === undefined) throw invalidArg(`model '${model}' needs the sequence fields`);
    let id = control.id;
    const assigned = id === undefined;
    if (id === undefined) {
      if (!control.start) {
        throw invalidArg(
          `inference request to model '${model}' must specify a non-zero or non-empty correlation ID`,
        );
      }
      id = this.#nextId++;
      this.lastAssigned = id;
    }
    if (control.start) {
      if (this.has(id)) this.#finish(id, "restart");
      this.#sums.set(key(id), { id, sum: 0 });
      control.onStarted?.();
    } else if (!this.has(id)) {
      throw invalidArg(
        `inference request for sequence ${formatSequenceId(id)} to model '${model}' must specify the START flag on the first request of the sequence`,
      );
    }
    return { id, assigned };
  }

  /**
   * A step that failed once admitted. Like the core, a START nobody would continue (its id
   * server-assigned, or its client asked for that) ends its sequence; others stay live.
   */
  failed(id: SequenceId, control: SequenceControl, assigned: boolean): void {
    if (control.start && (assigned || control.endIfStartFails === true)) this.#finish(id, "forced");
  }

  /** One step: adds `values` to the sequence's sum, ends it on END. */
  step(id: SequenceId, values: Int32Array, end: boolean): number {
    const state = this.#sums.get(key(id));
    if (state === undefined) throw cancelled(`sequence ${formatSequenceId(id)} ended`);
    for (const value of values) state.sum += value;
    if (end) this.#finish(id, "end");
    return state.sum;
  }
}

export interface RunningSumModel {
  readonly model: FakeModel;
  readonly sums: RunningSums;
  readonly gate: Gate;
  /** Requests inside the model at once, at most. */
  readonly maxActive: () => number;
}

/** `running_sum`: INPUT INT32 [-1] → SUM INT32 [1], one running sum per sequence. */
export function runningSumModel(name = "running_sum"): RunningSumModel {
  const sums = new RunningSums();
  const gate = new Gate();
  let active = 0;
  let maxActive = 0;
  const infer = async (request: InferRequest, model: FakeModel): Promise<InferResponse> => {
    // What the core validates before a request touches its sequence.
    const input = request.inputs.get("INPUT");
    if (input === undefined || input.datatype !== "INT32") {
      throw invalidArg(`model '${name}' expects input 'INPUT' of INT32`);
    }
    if (request.parameters.fail === true) throw new ServerError("INTERNAL", "the model failed on purpose");
    const { id, assigned } = sums.admit(request, name);
    active++;
    maxActive = Math.max(maxActive, active);
    try {
      await gate.pass();
      if (request.parameters.step_fails === true) {
        sums.failed(id, request.sequence!, assigned);
        throw new ServerError("INTERNAL", "the step failed on purpose");
      }
      const sum = sums.step(id, input.data as Int32Array, request.sequence?.end ?? false);
      return {
        modelName: model.name,
        modelVersion: model.version,
        id: request.id,
        // Like the core: only a server-assigned id comes back.
        parameters: assigned ? { sequence_id: id } : {},
        outputs: [{ name: "SUM", datatype: "INT32", shape: [1], data: new Int32Array([sum]) }],
      };
    } finally {
      active--;
    }
  };
  const model = new FakeModel({
    name,
    config: { maxBatchSize: 0, inputs: [inputConfig("INPUT", "INT32", [-1])] },
    inputs: [{ name: "INPUT", datatype: "INT32", shape: [-1] }],
    outputs: [{ name: "SUM", datatype: "INT32", shape: [1] }],
    sequences: sums,
    infer,
  });
  return { model, sums, gate, maxActive: () => maxActive };
}

/** `gated_echo`: a stateless echo whose requests can be held and released in any order. */
export function gatedEchoModel(name = "gated_echo"): { model: FakeModel; gate: Gate } {
  const gate = new Gate();
  const model = new FakeModel({
    name,
    infer: async (request, model) => {
      await gate.pass();
      return {
        modelName: model.name,
        modelVersion: model.version,
        id: request.id,
        parameters: {},
        outputs: [...request.inputs].map(([name, tensor]) => ({ name, ...tensor })),
      };
    },
  });
  return { model, gate };
}
