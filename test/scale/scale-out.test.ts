import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { after, before, describe, it } from "node:test";
import { Metadata } from "@grpc/grpc-js";
import type { ModelInferRequestMessage } from "../../src/frontends/grpc/messages.ts";
import { TestClient } from "../grpc/support/grpc-harness.ts";
import { rawBytes, StreamCall } from "../support/grpc-stream-call.ts";
import { type TempRepository, tempRepository } from "../support/model-repository.ts";
import {
  expectedBits,
  firstMismatch,
  SILERO_PATH,
  SILERO_SAMPLES,
  SILERO_SR_BYTES,
  SILERO_STATEFUL_CONFIG,
  SILERO_STATEFUL_MODEL,
  sequenceAudio,
} from "../support/silero-oracle.ts";
import { missingTools, Nginx, type Replica, SharedStoreCluster } from "./support/scale-kit.ts";

// Replicas behind nginx, sharing a Redis state store (deploy/nginx/nginx.conf as shipped):
// 3 replicas, 64 Silero VAD sequences streaming at once, half over HTTP (KServe binary
// tensors, the id in X-Sequence-Id) and half over gRPC (a ModelStreamInfer stream per
// sequence, the id in `sequence-id` metadata), every request numbered with sequence_step.
// A third of the way through one replica is killed with SIGKILL; two thirds of the way a
// fourth replica joins and nginx is reloaded with it. Clients retry what failed (a broken
// connection, nginx's 502, an UNAVAILABLE) with the same sequence_step, as the example
// clients do. Every sequence must end with exactly the outputs of an uninterrupted run
// (the oracle: ONNX Runtime in this process, each sequence alone), steps retried after
// being applied must not be applied again, and the fourth replica must have taken over
// some sequences from the tier.

const MODEL = SILERO_STATEFUL_MODEL;
const HTTP_SEQUENCES = 32;
const GRPC_SEQUENCES = 32;
const SEQUENCES = HTTP_SEQUENCES + GRPC_SEQUENCES;
const CHUNKS = 30;
const FIRST_ID = 7_000_000n;
/** Every 7th HTTP step is sent a second time after its answer: it must be answered, not applied again. */
const DUPLICATE_EVERY = 7;

const skip = missingTools(["redis-server", "redis-cli", "nginx"]);

const pause = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

class RetryableError extends Error {}

interface Progress {
  answered: number;
  /** When each sequence last got an answer, and the longest wait any saw across the kill. */
  lastAnswerMs: number[];
  killedAtMs: number | undefined;
  longestFailoverMs: number;
  retries: number;
  duplicates: number;
}

async function withRetries<T>(progress: Progress, attempt: () => Promise<T>): Promise<T> {
  for (let tries = 1; ; tries++) {
    try {
      return await attempt();
    } catch (error) {
      if (!(error instanceof RetryableError) || tries >= 80) throw error;
      progress.retries++;
      await pause(Math.min(20 * tries, 250));
    }
  }
}

/** One chunk over HTTP: binary tensors in and out, the sequence named only by X-Sequence-Id. */
async function httpStep(
  url: string,
  id: bigint,
  step: number,
  chunk: Float32Array,
  last: boolean,
): Promise<number> {
  const header = Buffer.from(
    JSON.stringify({
      parameters: {
        sequence_step: step,
        ...(step === 1 ? { sequence_start: true } : {}),
        ...(last ? { sequence_end: true } : {}),
        binary_data_output: true,
      },
      inputs: [
        {
          name: "input",
          datatype: "FP32",
          shape: [1, SILERO_SAMPLES],
          parameters: { binary_data_size: 2048 },
        },
        { name: "sr", datatype: "INT64", shape: [], parameters: { binary_data_size: 8 } },
      ],
    }),
  );
  let response: Response;
  try {
    response = await fetch(`${url}/v2/models/${MODEL}/infer`, {
      method: "POST",
      headers: {
        "content-type": "application/octet-stream",
        "inference-header-content-length": String(header.byteLength),
        "x-sequence-id": String(id),
      },
      body: Buffer.concat([header, rawBytes(chunk), SILERO_SR_BYTES]),
    });
  } catch (error) {
    throw new RetryableError(`HTTP request failed: ${(error as Error).message}`);
  }
  const body = Buffer.from(await response.arrayBuffer());
  if (response.status === 502 || response.status === 503 || response.status === 504) {
    throw new RetryableError(`HTTP ${response.status}: ${body.toString()}`);
  }
  assert.equal(response.status, 200, `sequence ${id} step ${step}: ${body.toString()}`);
  const jsonLength = Number(response.headers.get("inference-header-content-length"));
  return body.readUInt32LE(jsonLength);
}

/** A gRPC sequence: its own ModelStreamInfer stream, opened again whenever it breaks. */
class GrpcSequence {
  readonly #client: TestClient;
  readonly #id: bigint;
  #call: StreamCall | undefined;

  constructor(client: TestClient, id: bigint) {
    this.#client = client;
    this.#id = id;
  }

  async step(step: number, chunk: Float32Array, last: boolean): Promise<number> {
    const metadata = new Metadata();
    metadata.set("sequence-id", String(this.#id));
    this.#call ??= new StreamCall(this.#client, `s${this.#id}-`, metadata);
    const request: ModelInferRequestMessage = {
      model_name: MODEL,
      parameters: {
        sequence_step: { int64_param: String(step) },
        ...(step === 1 ? { sequence_start: { bool_param: true } } : {}),
        ...(last ? { sequence_end: { bool_param: true } } : {}),
      },
      inputs: [
        { name: "input", datatype: "FP32", shape: [1, SILERO_SAMPLES] },
        { name: "sr", datatype: "INT64", shape: [] },
      ],
      raw_input_contents: [rawBytes(chunk), SILERO_SR_BYTES],
    };
    let answer: Awaited<ReturnType<StreamCall["send"]>>;
    try {
      answer = await this.#call.send(request);
    } catch (error) {
      this.#call = undefined;
      throw new RetryableError(`the stream broke: ${(error as Error).message}`);
    }
    const message = answer.error_message ?? "";
    if (message !== "") {
      if (/retry/i.test(message)) throw new RetryableError(message);
      assert.fail(`sequence ${this.#id} step ${step}: ${message}`);
    }
    const raw = answer.infer_response!.raw_output_contents![0]!;
    return Buffer.from(raw.buffer, raw.byteOffset, raw.byteLength).readUInt32LE(0);
  }

  close(): void {
    void this.#call?.end().catch(() => {});
  }
}

describe("replicas behind nginx sharing a Redis state store", { skip }, () => {
  let repository: TempRepository;
  let cluster: SharedStoreCluster;
  let replicas: readonly Replica[];
  let nginx: Nginx;

  before(async () => {
    repository = tempRepository({
      [MODEL]: { config: SILERO_STATEFUL_CONFIG, onnx: readFileSync(SILERO_PATH) },
    });
    // The fourth is started now and joins nginx's upstreams later, as a new pod does once ready.
    cluster = await SharedStoreCluster.start(repository.path, [[], [], [], []]);
    replicas = cluster.replicas;
    nginx = await Nginx.start(replicas.slice(0, 3).map((replica) => replica.ports));
  });

  after(async () => {
    await nginx?.stop();
    await cluster?.stop();
    repository?.remove();
  });

  it("64 Silero VAD sequences over HTTP and gRPC survive kill -9 of a replica and a fourth joining, oracle-exact", async () => {
    const audio = Array.from({ length: SEQUENCES }, (_, s) => sequenceAudio(s, CHUNKS));
    const expected = await expectedBits(audio);
    const progress: Progress = {
      answered: 0,
      retries: 0,
      duplicates: 0,
      lastAnswerMs: [],
      killedAtMs: undefined,
      longestFailoverMs: 0,
    };
    const answered = (s: number): void => {
      const now = performance.now();
      const previous = progress.lastAnswerMs[s];
      if (progress.killedAtMs !== undefined && previous !== undefined && previous <= progress.killedAtMs) {
        progress.longestFailoverMs = Math.max(progress.longestFailoverMs, now - progress.killedAtMs);
      }
      progress.lastAnswerMs[s] = now;
      progress.answered++;
    };
    const total = SEQUENCES * CHUNKS;
    const httpUrl = `http://127.0.0.1:${nginx.httpPort}`;
    const grpcClient = new TestClient(nginx.grpcPort);

    // The operator: kills a replica a third of the way, adds one two thirds of the way.
    let killed = false;
    let joined: Promise<void> | undefined;
    let running = true;
    const operator = (async () => {
      while (running) {
        if (!killed && progress.answered >= total / 3) {
          killed = true;
          progress.killedAtMs = performance.now();
          await replicas[0]!.kill();
        }
        if (joined === undefined && progress.answered >= (2 * total) / 3) {
          joined = nginx.reload(replicas.slice(1).map((r) => r.ports));
          await joined;
        }
        await pause(5);
      }
    })();

    const runHttp = async (s: number): Promise<number[]> => {
      const id = FIRST_ID + BigInt(s);
      const bits: number[] = [];
      for (let c = 0; c < CHUNKS; c++) {
        const step = c + 1;
        const last = c === CHUNKS - 1;
        bits.push(await withRetries(progress, () => httpStep(httpUrl, id, step, audio[s]![c]!, last)));
        answered(s);
        if (step % DUPLICATE_EVERY === 0) {
          // The same step again, as a client that never saw the answer would send it.
          const again = await withRetries(progress, () => httpStep(httpUrl, id, step, audio[s]![c]!, last));
          assert.equal(again, bits[c], `sequence ${id}: step ${step} sent again must get the same answer`);
          progress.duplicates++;
        }
      }
      return bits;
    };
    const runGrpc = async (s: number): Promise<number[]> => {
      const sequence = new GrpcSequence(grpcClient, FIRST_ID + BigInt(s));
      const bits: number[] = [];
      for (let c = 0; c < CHUNKS; c++) {
        bits.push(await withRetries(progress, () => sequence.step(c + 1, audio[s]![c]!, c === CHUNKS - 1)));
        answered(s);
      }
      sequence.close();
      return bits;
    };

    let served: number[][];
    try {
      served = await Promise.all(
        Array.from({ length: SEQUENCES }, (_, s) => (s < HTTP_SEQUENCES ? runHttp(s) : runGrpc(s))),
      );
    } finally {
      running = false;
      await operator;
      grpcClient.close();
    }

    for (let s = 0; s < SEQUENCES; s++) {
      const mismatch = firstMismatch(s, served[s]!, expected[s]!);
      assert.equal(mismatch, undefined, mismatch);
    }
    assert.ok(killed && joined !== undefined, "the run outlasted the kill and the join");
    assert.ok(progress.retries > 0, "killing a replica mid-run made clients retry");
    assert.ok(progress.duplicates > 0);
    process.stdout.write(
      `${total} steps; ${progress.retries} retried after failures, ${progress.duplicates} sent twice on purpose; ` +
        `the longest a sequence waited across the kill: ${progress.longestFailoverMs.toFixed(0)} ms\n`,
    );
    const survivors = replicas.slice(1);
    const summaries = await Promise.all(survivors.map((r) => r.summary(MODEL)));
    const loaded = summaries.map((s) => (s.tier as { loaded: number }).loaded);
    // The killed replica's sequences were read from the tier by the others, and the fourth
    // replica took its share of the ring.
    assert.ok(loaded[0]! + loaded[1]! > 0, `the survivors took over sequences: ${JSON.stringify(summaries)}`);
    assert.ok(loaded[2]! > 0, `the fourth replica took over sequences: ${JSON.stringify(summaries[2])}`);
  });
});
