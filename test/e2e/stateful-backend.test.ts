import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import ort from "onnxruntime-node";
import type {
  InferOutputTensorMessage,
  ModelStreamInferResponseMessage,
} from "../../src/frontends/grpc/messages.ts";
import { OnnxModelBuilder } from "../../tools/onnx/onnx-model-builder.ts";
import { tensorNames } from "../../tools/onnx/stateful-backend-models.ts";
import { TestClient } from "../grpc/support/grpc-harness.ts";
import { errorOf, rawOutput, StreamCall } from "../support/grpc-stream-call.ts";
import { getJson } from "../support/http-client.ts";
import { type TempRepository, tempRepository } from "../support/model-repository.ts";
import { type ListeningLine, ServerProcess } from "../support/seqserve-process.ts";
import { batchCounts, listSequences } from "../support/sequence-kit.ts";
import {
  decode,
  onnxFileName,
  oracle,
  randomSegments,
  SEGMENT_LENGTH,
  STATEFUL_MODELS,
  type StatefulModelSpec,
  segmentRequest,
  sequenceIdOf,
  simulate,
  statefulConfig,
  statefulModelBytes,
  tolerance,
} from "../support/stateful-backend-kit.ts";
import { startTestServer } from "../support/test-server.ts";

// A Triton ONNX stateful backend user's repository and launch line, unchanged: the four
// kinds of example model (float, integer, int32 + fp16 state, bool + int8 state; uint64 and
// string CORRID; infer_end_requests 0 and 1; state_pairs split by spaces and by commas; the
// model file named by onnx_file_name), started with the backend's test command line, and
// driven as its stream client drives them: many sequences interleaved on one
// ModelStreamInfer stream, requests shaped [1, 4, 1, W] with the batch in the middle.
// Every output is checked against a simulation of the model and, bit for bit, against ONNX
// Runtime run in this process on each sequence alone.

const SEQUENCES = 24;
const SEGMENTS = 5;

/** The backend's test line (`tritonserver --grpc-port … --model-repository models --backend-config=stateful,ort-logging-level=3 --model-load-thread-count 1`), on free ports. */
function launchLine(repository: string): string[] {
  return [
    "bin/seqserve.js",
    "--grpc-port",
    "0",
    "--model-repository",
    repository,
    "--backend-config=stateful,ort-logging-level=3",
    "--model-load-thread-count",
    "1",
    // Not in the backend's line: the other ports free too, and JSON logs for the test to read.
    "--http-port",
    "0",
    "--metrics-port",
    "0",
    "--log-format",
    "json",
  ];
}

let repository: TempRepository;
let server: ServerProcess;
let listening: ListeningLine;
let client: TestClient;

before(async () => {
  repository = tempRepository();
  for (const spec of STATEFUL_MODELS) {
    // The model file is named by onnx_file_name, not model.onnx.
    repository.add(spec.name, {
      config: statefulConfig(spec),
      onnx: statefulModelBytes(spec),
      fileName: onnxFileName(spec),
    });
  }
  server = new ServerProcess(process.execPath, launchLine(repository.path));
  listening = await server.listening;
  client = new TestClient(listening.grpc_port!);
});

after(async () => {
  client?.close();
  await server?.stop();
  repository?.remove();
});

const http = () => `http://127.0.0.1:${listening.http_port}`;

/** Sends every segment of every sequence interleaved on one stream, as the backend's client does. */
async function streamSequences(spec: StatefulModelSpec, seed: number) {
  const data = randomSegments(spec, SEQUENCES, SEGMENTS, seed);
  const call = new StreamCall(client);
  const answers: Promise<ModelStreamInferResponseMessage>[][] = data.map(() => []);
  for (let segment = 0; segment < SEGMENTS; segment++) {
    for (let sequence = 0; sequence < SEQUENCES; sequence++) {
      const end = spec.inferEndRequests && segment === SEGMENTS - 1;
      answers[sequence]!.push(
        call.send(
          segmentRequest(spec, sequence, segment, data[sequence]![segment]!, { start: segment === 0, end }),
        ),
      );
    }
  }
  // With infer_end_requests 0 the client ends each sequence with one more request, which runs nothing.
  const ends = spec.inferEndRequests
    ? []
    : data.map((segments, sequence) =>
        call.send(segmentRequest(spec, sequence, SEGMENTS, segments[0]!, { start: false, end: true })),
      );
  const responses = await Promise.all(answers.map((list) => Promise.all(list)));
  const endResponses = await Promise.all(ends);
  await call.end();
  return { data, responses, endResponses };
}

describe("the stateful backend's example models behind its launch line", { timeout: 120_000 }, () => {
  it("loads all four models, with the model file onnx_file_name names", async () => {
    const index = (await (await fetch(`${http()}/v2/repository/index`, { method: "POST" })).json()) as {
      name: string;
      state: string;
    }[];
    assert.deepEqual(
      index.map((e) => `${e.name}:${e.state}`),
      STATEFUL_MODELS.map((spec) => `${spec.name}:READY`).sort(),
    );
  });

  it("reports what it does not use on this machine, one line each, and keeps serving", () => {
    const notes = server.lines.filter((l) => l.event === "config_note").map((l) => String(l.msg));
    for (const key of [
      "ort_ep",
      "compute_precision",
      "enable_trt_caching",
      "trt_cache_dir",
      "enable_cuda_graph",
    ]) {
      assert.ok(
        notes.some((n) => n.includes(`parameter '${key}' of model 'accumulate_fp32' has no effect here`)),
        key,
      );
    }
    assert.ok(notes.some((n) => n.includes("asks for KIND_GPU; seqserve runs it on the CPU")));
  });

  it("lists sequence(string_id) among the server's extensions", async () => {
    const metadata = (await client.unary("ServerMetadata", {})) as { extensions: string[] };
    assert.ok(metadata.extensions.includes("sequence"));
    assert.ok(metadata.extensions.includes("sequence(string_id)"));
  });

  it("gives the stream client the config it reads: CORRID type and infer_end_requests", async () => {
    for (const spec of STATEFUL_MODELS) {
      const { config } = (await client.unary("ModelConfig", { name: spec.name })) as {
        config: {
          backend: string;
          parameters: Record<string, { string_value: string }>;
          sequence_batching: { control_input: { name: string; control: { data_type: string }[] }[] };
          input: { name: string; dims: string[] }[];
        };
      };
      assert.equal(config.backend, "stateful");
      assert.equal(config.parameters.infer_end_requests?.string_value, spec.inferEndRequests ? "1" : "0");
      const corrid = config.sequence_batching.control_input.find((c) => c.name === "CORRID");
      assert.equal(corrid?.control[0]?.data_type, spec.corrid);
      assert.deepEqual(config.input[0]?.dims.map(Number), [SEGMENT_LENGTH, -1, spec.width]);
    }
  });

  for (const [m, spec] of STATEFUL_MODELS.entries()) {
    it(`${spec.name}: ${SEQUENCES} interleaved sequences of ${SEGMENTS} segments, every output right`, async () => {
      const { data, responses, endResponses } = await streamSequences(spec, 7 + m);
      const session = await ort.InferenceSession.create(statefulModelBytes(spec));
      try {
        for (let sequence = 0; sequence < SEQUENCES; sequence++) {
          const expected = simulate(spec, data[sequence]!);
          const exact = await oracle(session, spec, data[sequence]!);
          for (let segment = 0; segment < SEGMENTS; segment++) {
            const response = responses[sequence]![segment]!;
            assert.equal(response.infer_response?.id, `${sequence}_${segment}`);
            for (const pair of spec.pairs) {
              const name = tensorNames(pair).output;
              const where = `${spec.name} sequence ${sequence} segment ${segment} ${name}`;
              const outputs: readonly InferOutputTensorMessage[] = response.infer_response?.outputs ?? [];
              const output = outputs.find((o) => o.name === name);
              // Triton's leading batch of 1, then the model's [seq, batch, width].
              assert.deepEqual(output?.shape?.map(Number), [1, SEGMENT_LENGTH, 1, spec.width], where);
              const raw = new Uint8Array(rawOutput(response, name));
              assert.deepEqual(raw, exact[segment]!.get(name), `${where}: as ONNX Runtime alone`);
              const got = decode(pair.datatype, raw);
              const want = expected[segment]!.get(name)!;
              const atol = tolerance(pair.datatype);
              got.forEach((v, i) => {
                const error = Math.abs(v - want[i]!);
                assert.ok(error <= atol + 1e-5 * Math.abs(want[i]!), `${where}[${i}]: ${v} vs ${want[i]}`);
              });
            }
          }
        }
      } finally {
        await session.release();
      }
      // infer_end_requests 0: the end request ran nothing and answered OK with no outputs.
      for (const response of endResponses) {
        assert.equal(errorOf(response), "");
        assert.deepEqual(response.infer_response?.outputs ?? [], []);
      }
      // Sequences were batched together along the marked dimension.
      const batches = await batchCounts(http(), spec.name);
      assert.ok(
        Object.keys(batches).some((size) => Number(size) > 1),
        JSON.stringify(batches),
      );
      // Every sequence ended: nothing live, no state held.
      const { body } = await getJson(`${http()}/v2/models/${spec.name}/sequences`);
      const summary = (body as { summary: { live: number; state_bytes: number; ended: { end: number } } })
        .summary;
      assert.equal(summary.live, 0);
      assert.equal(summary.state_bytes, 0);
      assert.equal(summary.ended.end, SEQUENCES);
    });
  }

  it("a segment of an ended sequence is refused with Triton's message, and the id starts afresh", async () => {
    const spec = STATEFUL_MODELS[1]!;
    const [segments] = randomSegments(spec, 1, 2, 99);
    const call = new StreamCall(client);
    const late = await call.send(segmentRequest(spec, 0, 9, segments![0]!, { start: false, end: false }));
    assert.equal(
      errorOf(late),
      `inference request for sequence ${sequenceIdOf(spec, 0)} to model '${spec.name}' must specify the START flag on the first request of the sequence`,
    );
    const fresh = await call.send(segmentRequest(spec, 0, 10, segments![0]!, { start: true, end: true }));
    assert.equal(errorOf(fresh), "");
    await call.end();
  });

  it("logs the backend's runner messages: state resets", () => {
    const resets = server.lines.filter((l) => l.event === "sequence_reset" && l.model === "accumulate_int32");
    assert.ok(resets.length > 0);
    assert.match(String(resets[0]!.msg), /^resetting state for sequences? \d+/);
  });
});

describe("the backend's example buffer parameters with fewer sequence slots", { timeout: 60_000 }, () => {
  it("initial_buffer_size 512 over max_candidate_sequences 256 is lowered to the 230 usable, and the model serves", async () => {
    // accumulate_fp32's config as the backend ships it (initial_buffer_size 512,
    // subsequent_buffer_size 100, buffer_alloc_threshold 32, buffer_dealloc_threshold 200),
    // on one instance of 256 slots, of which max_candidate_sequence_use_ratio 0.9 leaves 230.
    const spec: StatefulModelSpec = {
      ...STATEFUL_MODELS[0]!,
      name: "accumulate_256",
      inferEndRequests: true,
      maxCandidateSequences: 256,
      instances: 1,
    };
    const small = await startTestServer({
      [spec.name]: {
        config: statefulConfig(spec),
        onnx: statefulModelBytes(spec),
        fileName: onnxFileName(spec),
      },
    });
    const grpc = new TestClient(small.grpcPort);
    try {
      const rowBytes = spec.width * 4;
      assert.equal((await listSequences(small.url, spec.name)).summary.state_allocated_bytes, 230 * rowBytes);
      const [segments] = randomSegments(spec, 1, 2, 3);
      const call = new StreamCall(grpc);
      const answers = [
        await call.send(segmentRequest(spec, 0, 0, segments![0]!, { start: true, end: false })),
        await call.send(segmentRequest(spec, 0, 1, segments![1]!, { start: false, end: true })),
      ];
      await call.end();
      const session = await ort.InferenceSession.create(statefulModelBytes(spec));
      const exact = await oracle(session, spec, segments!);
      await session.release();
      answers.forEach((answer, i) => {
        assert.equal(errorOf(answer), "");
        assert.deepEqual(
          new Uint8Array(rawOutput(answer, "Output")),
          exact[i]!.get("Output"),
          `segment ${i}`,
        );
      });
    } finally {
      grpc.close();
      await small.stop();
    }
  });
});

describe("an instance group on two GPUs", { timeout: 60_000 }, () => {
  it("has count instances on each GPU, with their sequence slots", async () => {
    // count 1 on GPUs 0 and 1: two instances of 16 slots, of which 28 are usable at once.
    const spec: StatefulModelSpec = {
      ...STATEFUL_MODELS[1]!,
      name: "two_gpus",
      instances: 1,
      maxCandidateSequences: 16,
      maxBatchSize: 4,
      parameters: {
        initial_buffer_size: "8",
        subsequent_buffer_size: "4",
        buffer_alloc_threshold: "4",
        buffer_dealloc_threshold: "8",
      },
    };
    const config = statefulConfig(spec).replace("gpus: [0]", "gpus: [0, 1]");
    assert.ok(config.includes("gpus: [0, 1]"));
    const small = await startTestServer({
      [spec.name]: { config, onnx: statefulModelBytes(spec), fileName: onnxFileName(spec) },
    });
    const grpc = new TestClient(small.grpcPort);
    try {
      const { body } = await getJson(`${small.url}/v2/models/${spec.name}/config`);
      const groups = (body as { instance_group: { count: number; kind: string }[] }).instance_group;
      assert.deepEqual(
        groups.map((g) => [g.count, g.kind]),
        [[2, "KIND_CPU"]],
      );
      const [segments] = randomSegments(spec, 1, 1, 5);
      const call = new StreamCall(grpc);
      const start = async (sequence: number) =>
        errorOf(
          await call.send(segmentRequest(spec, sequence, 0, segments![0]!, { start: true, end: false })),
        );
      for (let sequence = 0; sequence < 28; sequence++)
        assert.equal(await start(sequence), "", `sequence ${sequence}`);
      assert.equal(
        await start(28),
        `model '${spec.name}' has 28 live sequences, as many as max_candidate_sequence_use_ratio 0.9 of its 32 sequence slots allows; retry later`,
      );
      await call.end();
    } finally {
      grpc.close();
      await small.stop();
    }
  });
});

describe("a reset input spelled otherwise than the config's START control", { timeout: 60_000 }, () => {
  /**
   * accumulate_fp32 whose reset input is `resetsequence`, and which adds it to its output:
   * an answer shows whether START reached the model, beside the state it zeroes.
   */
  function lowerCaseResetModel(width: number): Uint8Array {
    return new OnnxModelBuilder({ opset: 17 })
      .input("Input", "FP32", ["seq", "batch", width])
      .input("Accumulate_In", "FP32", ["batch", width])
      .input("resetsequence", "BOOL", ["batch", 1])
      .output("Output", "FP32", ["seq", "batch", width])
      .output("Accumulate_Out", "FP32", ["batch", width])
      .initializer("seq_axis", "INT64", [1], [0])
      .node("Not", ["resetsequence"], ["keep"])
      .node("Cast", ["keep"], ["keepf"], { to: 1 })
      .node("Mul", ["Accumulate_In", "keepf"], ["kept"])
      .node("ReduceSum", ["Input", "seq_axis"], ["sum"], { keepdims: 0 })
      .node("Add", ["kept", "sum"], ["Accumulate_Out"])
      .node("Cast", ["resetsequence"], ["resetf"], { to: 1 })
      .node("Add", ["Input", "Accumulate_Out"], ["withState"])
      .node("Add", ["withState", "resetf"], ["Output"])
      .toBytes();
  }

  it("START (config ResetSequence) is fed to the model's resetsequence: true on the first step only", async () => {
    const spec: StatefulModelSpec = {
      ...STATEFUL_MODELS[0]!,
      name: "lower_reset",
      inferEndRequests: true,
      instances: 1,
    };
    const model = lowerCaseResetModel(spec.width);
    const config = statefulConfig(spec);
    assert.ok(config.includes('name: "ResetSequence"'));
    const small = await startTestServer({
      [spec.name]: { config, onnx: model, fileName: onnxFileName(spec) },
    });
    const grpc = new TestClient(small.grpcPort);
    try {
      const [segments] = randomSegments(spec, 1, 3, 21);
      const call = new StreamCall(grpc);
      const answers = [];
      for (const [i, segment] of segments!.entries()) {
        answers.push(await call.send(segmentRequest(spec, 0, i, segment, { start: i === 0, end: i === 2 })));
      }
      await call.end();
      // The same steps on ONNX Runtime in this process, the state fed back, reset on the first.
      const session = await ort.InferenceSession.create(model);
      try {
        let state: ort.Tensor = new ort.Tensor("float32", new Float32Array(spec.width), [1, spec.width]);
        for (const [i, segment] of segments!.entries()) {
          const result = await session.run({
            Input: new ort.Tensor("float32", segment.get("Input") as Float32Array, [
              SEGMENT_LENGTH,
              1,
              spec.width,
            ]),
            Accumulate_In: state,
            resetsequence: new ort.Tensor("bool", Uint8Array.of(i === 0 ? 1 : 0), [1, 1]),
          });
          state = result.Accumulate_Out!;
          const data = result.Output!.data as Float32Array;
          assert.equal(errorOf(answers[i]!), "", `step ${i}`);
          assert.deepEqual(
            new Uint8Array(rawOutput(answers[i]!, "Output")),
            new Uint8Array(data.buffer, data.byteOffset, data.byteLength),
            `step ${i}`,
          );
        }
      } finally {
        await session.release();
      }
    } finally {
      grpc.close();
      await small.stop();
    }
  });
});

describe("state pairs in the model's graph description, as the backend reads them without state_pairs", {
  timeout: 60_000,
}, () => {
  it("keeps both states of the mixed int32 + fp16 example, every output as ONNX Runtime alone gives it", async () => {
    const spec: StatefulModelSpec = {
      ...STATEFUL_MODELS[2]!,
      name: "described_states",
      inferEndRequests: true,
      instances: 1,
      // One line in the order the words come (OutputState first: the pair is written output
      // first), with dimensions after the names; one in the PastValue words.
      graphDescription:
        "Accumulators of int32 and fp16 rows.\n" +
        "OutputState / InputState: <<<Accumulate_Out_int32:-1x7, Accumulate_In_int32:-1x7>>>\n" +
        "PastValueInput PastValueOutput <<<Accumulate_In_fp16, Accumulate_Out_fp16>>>",
    };
    const config = statefulConfig(spec);
    assert.ok(!config.includes("state_pairs"));
    const model = statefulModelBytes(spec);
    const small = await startTestServer({
      [spec.name]: { config, onnx: model, fileName: onnxFileName(spec) },
    });
    const grpc = new TestClient(small.grpcPort);
    const sequences = 3;
    const segments = 3;
    try {
      const data = randomSegments(spec, sequences, segments, 31);
      const call = new StreamCall(grpc);
      const answers: Promise<ModelStreamInferResponseMessage>[][] = data.map(() => []);
      for (let segment = 0; segment < segments; segment++) {
        for (let sequence = 0; sequence < sequences; sequence++) {
          const flags = { start: segment === 0, end: segment === segments - 1 };
          answers[sequence]!.push(
            call.send(segmentRequest(spec, sequence, segment, data[sequence]![segment]!, flags)),
          );
        }
      }
      const responses = await Promise.all(answers.map((list) => Promise.all(list)));
      await call.end();
      const session = await ort.InferenceSession.create(model);
      try {
        for (let sequence = 0; sequence < sequences; sequence++) {
          const exact = await oracle(session, spec, data[sequence]!);
          for (let segment = 0; segment < segments; segment++) {
            const response = responses[sequence]![segment]!;
            assert.equal(errorOf(response), "", `sequence ${sequence} segment ${segment}`);
            for (const pair of spec.pairs) {
              const name = tensorNames(pair).output;
              assert.deepEqual(
                new Uint8Array(rawOutput(response, name)),
                exact[segment]!.get(name),
                `sequence ${sequence} segment ${segment} ${name}`,
              );
            }
          }
        }
      } finally {
        await session.release();
      }
      // The states are the server's: the model's config lists neither as an input.
      const { body } = await getJson(`${small.url}/v2/models/${spec.name}/config`);
      const inputs = (body as { input: { name: string }[] }).input.map((input) => input.name);
      assert.deepEqual(inputs.sort(), ["Input_fp16", "Input_int32"]);
    } finally {
      grpc.close();
      await small.stop();
    }
  });
});
