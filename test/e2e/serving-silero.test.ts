import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { after, before, describe, it } from "node:test";
import { InferenceSession, Tensor } from "onnxruntime-node";
import { inferBinary, outputData, postJson } from "../support/http-client.ts";
import { startTestServer, type TestServer } from "../support/test-server.ts";

// Silero VAD v5 served over HTTP (the example's config, the model file the examples link
// to) answers bit for bit what ONNX Runtime answers in this process for the same input:
// through JSON and through binary tensors, chunk after chunk with the state fed back.

const MODEL_FILE = new URL("../../examples/models/silero_vad/1/model.onnx", import.meta.url);
const CONFIG_FILE = new URL("../../examples/models/silero_vad/config.pbtxt", import.meta.url);
const CHUNK = 512;
const STATE = 2 * 128;
const SAMPLE_RATE = 16000n;

/** `chunks` × 512 samples of a deterministic signal: a tone that comes and goes, plus noise. */
function audio(chunks: number, seed: number): Float32Array {
  const samples = new Float32Array(chunks * CHUNK);
  let x = seed;
  for (let i = 0; i < samples.length; i++) {
    x = (x * 1103515245 + 12345) % 2 ** 31;
    const noise = (x / 2 ** 31 - 0.5) * 0.05;
    const envelope = Math.floor(i / (CHUNK * 2)) % 2 === 0 ? 0.6 : 0.02;
    samples[i] = envelope * Math.sin((2 * Math.PI * 220 * i) / 16000) + noise;
  }
  return samples;
}

/**
 * A JSON array of exactly these floats. JSON.stringify writes -0 as 0, and Silero's state
 * holds -0s: the server must get the very values ONNX Runtime gets here.
 */
const floatsJson = (array: Float32Array): string =>
  `[${Array.from(array, (v) => (Object.is(v, -0) ? "-0" : String(v))).join(",")}]`;

const bits = (array: Float32Array): string =>
  Buffer.from(array.buffer, array.byteOffset, array.byteLength).toString("hex");

const float32 = (bytes: Buffer): Float32Array =>
  new Float32Array(bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength));

let server: TestServer;
let session: InferenceSession;
before(async () => {
  const onnx = readFileSync(MODEL_FILE);
  server = await startTestServer({ silero_vad: { config: readFileSync(CONFIG_FILE, "utf8"), onnx } });
  // The server's session options for a model that sets none: all graph optimizations, one
  // intra-op thread, sequential execution.
  session = await InferenceSession.create(onnx, {
    graphOptimizationLevel: "all",
    intraOpNumThreads: 1,
    executionMode: "sequential",
  });
});
after(async () => {
  await session?.release();
  await server?.stop();
});

/** ONNX Runtime in this process: `output` and `stateN` for a batch of chunks. */
async function direct(
  input: Float32Array,
  state: Float32Array,
  batch = 1,
): Promise<{ output: Float32Array; stateN: Float32Array }> {
  const result = await session.run({
    input: new Tensor("float32", input, [batch, CHUNK]),
    state: new Tensor("float32", state, [2, batch, 128]),
    sr: new Tensor("int64", new BigInt64Array([SAMPLE_RATE]), []),
  });
  return { output: result.output!.data as Float32Array, stateN: result.stateN!.data as Float32Array };
}

describe("Silero VAD v5 over HTTP equals ONNX Runtime in-process, bit for bit", () => {
  it("through JSON tensors, feeding stateN back chunk after chunk", async () => {
    const signal = audio(8, 7);
    let state: Float32Array = new Float32Array(STATE);
    const probabilities: number[] = [];
    for (let c = 0; c < 8; c++) {
      const chunk = signal.subarray(c * CHUNK, (c + 1) * CHUNK);
      const answer = await postJson(
        `${server.url}/v2/models/silero_vad/infer`,
        `{"inputs":[
          {"name":"input","datatype":"FP32","shape":[1,${CHUNK}],"data":${floatsJson(chunk)}},
          {"name":"state","datatype":"FP32","shape":[2,1,128],"data":${floatsJson(state)}},
          {"name":"sr","datatype":"INT64","shape":[],"data":[${SAMPLE_RATE}]}]}`,
      );
      const output = Float32Array.from(outputData(answer, "output") as number[]);
      const stateN = Float32Array.from(outputData(answer, "stateN") as number[]);
      const expected = await direct(chunk.slice(), state);
      assert.equal(bits(output), bits(expected.output), `output of chunk ${c}`);
      assert.equal(bits(stateN), bits(expected.stateN), `stateN of chunk ${c}`);
      assert.deepEqual(
        (answer.body.outputs as { name: string; shape: number[] }[]).map((o) => [o.name, o.shape]),
        [
          ["output", [1, 1]],
          ["stateN", [2, 1, 128]],
        ],
      );
      probabilities.push(output[0]!);
      state = stateN;
    }
    // The chain carried state: not every chunk got the same answer.
    assert.ok(new Set(probabilities).size > 1, `probabilities ${probabilities.join(", ")}`);
  });

  it("through binary tensors, feeding stateN back chunk after chunk", async () => {
    const signal = audio(8, 11);
    let state: Float32Array = new Float32Array(STATE);
    for (let c = 0; c < 8; c++) {
      const chunk = signal.slice(c * CHUNK, (c + 1) * CHUNK);
      const answer = await inferBinary(server.url, "silero_vad", [
        { name: "input", datatype: "FP32", shape: [1, CHUNK], data: chunk },
        { name: "state", datatype: "FP32", shape: [2, 1, 128], data: state },
        { name: "sr", datatype: "INT64", shape: [], data: new BigInt64Array([SAMPLE_RATE]) },
      ]);
      assert.equal(answer.status, 200, answer.error);
      const output = float32(answer.outputs.get("output")!);
      const stateN = float32(answer.outputs.get("stateN")!);
      const expected = await direct(chunk, state);
      assert.equal(bits(output), bits(expected.output), `output of chunk ${c}`);
      assert.equal(bits(stateN), bits(expected.stateN), `stateN of chunk ${c}`);
      state = stateN;
    }
  });

  it("two streams in one request (batch 2, the state's batch on axis 1)", async () => {
    const first = audio(1, 3);
    const second = audio(1, 5).map((v) => v * 0.1);
    const input = new Float32Array([...first, ...second]);
    const state = new Float32Array(2 * STATE).map((_, i) => Math.sin(i) * 0.01);
    const answer = await inferBinary(server.url, "silero_vad", [
      { name: "input", datatype: "FP32", shape: [2, CHUNK], data: input },
      { name: "state", datatype: "FP32", shape: [2, 2, 128], data: state },
      { name: "sr", datatype: "INT64", shape: [], data: new BigInt64Array([SAMPLE_RATE]) },
    ]);
    assert.equal(answer.status, 200, answer.error);
    const expected = await direct(input, state, 2);
    assert.equal(bits(float32(answer.outputs.get("output")!)), bits(expected.output));
    assert.equal(bits(float32(answer.outputs.get("stateN")!)), bits(expected.stateN));
  });
});

describe("Silero VAD v5 given empty tensors", () => {
  it("refuses a batch of 0 (ONNX Runtime aborts the process on it), and serves on", async () => {
    const empty = await postJson(
      `${server.url}/v2/models/silero_vad/infer`,
      `{"inputs":[
        {"name":"input","datatype":"FP32","shape":[0,${CHUNK}],"data":[]},
        {"name":"state","datatype":"FP32","shape":[2,0,128],"data":[]},
        {"name":"sr","datatype":"INT64","shape":[],"data":[${SAMPLE_RATE}]}]}`,
    );
    assert.equal(empty.status, 400, JSON.stringify(empty.body));
    assert.equal(
      empty.body.error,
      "input 'input' has no elements (shape [0,512]): ONNX models are not run on empty tensors, which ONNX Runtime may not survive",
    );
    const chunk = audio(1, 3);
    const answer = await postJson(
      `${server.url}/v2/models/silero_vad/infer`,
      `{"inputs":[
        {"name":"input","datatype":"FP32","shape":[1,${CHUNK}],"data":${floatsJson(chunk)}},
        {"name":"state","datatype":"FP32","shape":[2,1,128],"data":${floatsJson(new Float32Array(STATE))}},
        {"name":"sr","datatype":"INT64","shape":[],"data":[${SAMPLE_RATE}]}]}`,
    );
    const expected = await direct(chunk.slice(), new Float32Array(STATE));
    assert.equal(bits(Float32Array.from(outputData(answer, "output") as number[])), bits(expected.output));
  });
});
