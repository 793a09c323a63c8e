// Silero VAD v5 throughput through seqserve, beside ONNX Runtime in-process, in one run on
// one machine. Run: npm run bench -- [--seconds 10] [--warmup 2] [--only name,name]
//
// Scenarios (each prints chunks/s = answered requests per second):
//   inprocess-b1 / inprocess-b64   onnxruntime-node in this process, one intra-op thread (as
//                                  the server's instances), batch 1 / batch 64, state fed back
//   http-json-stateless            64 connections, stateless model, client passes state (JSON)
//   http-binary-stateless          the same through the binary tensor extension
//   http-binary-stateful           256 sequences over 256 connections, state on the server,
//                                  Oldest strategy, batches up to 64
//   http-binary-stateful-nobatch   the same with max_batch_size 1 (no batching)
//   grpc-unary-stateful            256 sequences, ModelInfer
//   grpc-stream-stateful           256 sequences over 16 ModelStreamInfer streams
//   ws-stateful                    256 sequences, one WebSocket each
//   sagemaker-stateful             256 SageMaker sessions over POST /invocations (Triton's
//                                  SageMaker binary form), state on the server
//   session-step-overhead          one session, one request at a time: the same step over
//                                  /v2/models/{m}/infer and over /invocations, alternated;
//                                  prints µs per step for each and the difference
import { mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import ort from "onnxruntime-node";
import {
  audioChunks,
  binaryOutputs,
  binaryRequest,
  bytesOf,
  CHUNK,
  closeSession,
  encodeGrpcRequest,
  GrpcClient,
  HttpClient,
  openSession,
  type RunResult,
  runLoops,
  SAMPLE_RATE,
  sessionStep,
} from "./load-clients.ts";
import { startServerProcess } from "./server-process.ts";
import { WsSequenceClient } from "./ws-client.ts";

const SILERO = fileURLToPath(new URL("../examples/models/silero_vad/1/model.onnx", import.meta.url));
const STATEFUL_CONFIG = readFileSync(
  new URL("../examples/models/silero_vad_stateful/config.pbtxt", import.meta.url),
  "utf8",
);
const STATELESS_CONFIG = readFileSync(
  new URL("../examples/models/silero_vad/config.pbtxt", import.meta.url),
  "utf8",
);

const { values } = parseArgs({
  options: {
    seconds: { type: "string", default: "10" },
    warmup: { type: "string", default: "2" },
    only: { type: "string" },
    sequences: { type: "string", default: "256" },
  },
});
const SECONDS = Number(values.seconds);
const WARMUP = Number(values.warmup);
const SEQUENCES = Number(values.sequences);
const only = values.only?.split(",");
const wanted = (name: string) => only === undefined || only.includes(name);

function repository(): string {
  const dir = mkdtempSync(join(tmpdir(), "seqserve-bench-"));
  const model = (name: string, config: string) => {
    mkdirSync(join(dir, name, "1"), { recursive: true });
    writeFileSync(join(dir, name, "config.pbtxt"), config.replace(/^name: .*$/m, `name: "${name}"`));
    symlinkSync(SILERO, join(dir, name, "1", "model.onnx"));
  };
  model("silero_vad", STATELESS_CONFIG);
  model("silero_vad_stateful", STATEFUL_CONFIG);
  model(
    "silero_vad_stateful_nobatch",
    STATEFUL_CONFIG.replace("max_batch_size: 64", "max_batch_size: 1").replace(
      "preferred_batch_size: [ 64 ]",
      "preferred_batch_size: [ 1 ]",
    ),
  );
  return dir;
}

const chunks = audioChunks(64);
const srBytes = bytesOf(BigInt64Array.from([SAMPLE_RATE]));
const results: { scenario: string; chunksPerSecond: number; note: string }[] = [];

function report(scenario: string, result: RunResult, note = ""): void {
  const rate = result.requests / result.seconds;
  results.push({ scenario, chunksPerSecond: rate, note });
  process.stdout.write(`${scenario.padEnd(30)} ${rate.toFixed(0).padStart(8)} chunks/s  ${note}\n`);
}

async function inProcess(batch: number): Promise<RunResult> {
  const session = await ort.InferenceSession.create(SILERO, {
    intraOpNumThreads: 1,
    executionMode: "sequential",
  });
  const input = new Float32Array(batch * CHUNK);
  for (let b = 0; b < batch; b++) input.set(chunks[b % chunks.length]!, b * CHUNK);
  let state = new ort.Tensor("float32", new Float32Array(2 * batch * 128), [2, batch, 128]);
  const sr = new ort.Tensor("int64", BigInt64Array.from([SAMPLE_RATE]), []);
  const feeds = { input: new ort.Tensor("float32", input, [batch, CHUNK]), state, sr };
  const result = await runLoops(1, SECONDS, WARMUP, async () => {
    const out = await session.run({ ...feeds, state });
    state = out.stateN as typeof state;
  });
  await session.release();
  return { requests: result.requests * batch, seconds: result.seconds };
}

async function main(): Promise<void> {
  process.stdout.write(`seqserve Silero VAD benchmark: ${SECONDS}s per scenario after ${WARMUP}s warm-up\n`);
  if (wanted("inprocess-b1")) report("inprocess-b1", await inProcess(1), "onnxruntime-node, 1 thread");
  if (wanted("inprocess-b64")) report("inprocess-b64", await inProcess(64), "onnxruntime-node, 1 thread");

  const repo = repository();
  const server = await startServerProcess(repo, ["--allow-sagemaker", "true", "--sagemaker-port", "0"]);
  try {
    const stateless = async (binary: boolean) => {
      const http = new HttpClient(server.httpPort, 64);
      const states: Uint8Array[] = Array.from({ length: 64 }, () => new Uint8Array(2 * 128 * 4));
      let n = 0;
      const result = await runLoops(64, SECONDS, WARMUP, async (w) => {
        const chunk = chunks[n++ % chunks.length]!;
        if (binary) {
          const { body, headerLength } = binaryRequest(
            [
              { name: "input", datatype: "FP32", shape: [1, CHUNK], bytes: bytesOf(chunk) },
              { name: "state", datatype: "FP32", shape: [2, 1, 128], bytes: states[w]! },
              { name: "sr", datatype: "INT64", shape: [], bytes: srBytes },
            ],
            '"binary_data_output":true',
          );
          const res = await http.post(
            "/v2/models/silero_vad/infer",
            { "inference-header-content-length": String(headerLength) },
            body,
          );
          if (res.status !== 200) throw new Error(res.body.toString());
          states[w] = new Uint8Array(binaryOutputs(res).get("stateN")!);
        } else {
          const state = new Float32Array(states[w]!.buffer.slice(0));
          const body = Buffer.from(
            `{"inputs":[{"name":"input","datatype":"FP32","shape":[1,${CHUNK}],"data":[${chunk.join(",")}]},{"name":"state","datatype":"FP32","shape":[2,1,128],"data":[${state.join(",")}]},{"name":"sr","datatype":"INT64","shape":[],"data":[16000]}]}`,
          );
          const res = await http.post(
            "/v2/models/silero_vad/infer",
            { "content-type": "application/json" },
            body,
          );
          if (res.status !== 200) throw new Error(res.body.toString());
          const outputs = (JSON.parse(res.body.toString()) as { outputs: { name: string; data: number[] }[] })
            .outputs;
          states[w] = bytesOf(Float32Array.from(outputs.find((o) => o.name === "stateN")!.data));
        }
      });
      http.close();
      return result;
    };
    if (wanted("http-json-stateless"))
      report("http-json-stateless", await stateless(false), "64 connections, batch 1, client passes state");
    if (wanted("http-binary-stateless"))
      report("http-binary-stateless", await stateless(true), "64 connections, batch 1, client passes state");

    let nextId = 1n;
    const statefulHttp = async (model: string) => {
      const http = new HttpClient(server.httpPort, SEQUENCES);
      const ids = Array.from({ length: SEQUENCES }, () => nextId++);
      const started = new Array<boolean>(SEQUENCES).fill(false);
      const steps = new Array<number>(SEQUENCES).fill(0);
      const result = await runLoops(SEQUENCES, SECONDS, WARMUP, async (w, last) => {
        const flags = `${started[w] ? "" : ',"sequence_start":true'}${last ? ',"sequence_end":true' : ""}`;
        started[w] = true;
        const { body, headerLength } = binaryRequest(
          [
            {
              name: "input",
              datatype: "FP32",
              shape: [1, CHUNK],
              bytes: bytesOf(chunks[(w + steps[w]!++) % chunks.length]!),
            },
            { name: "sr", datatype: "INT64", shape: [], bytes: srBytes },
          ],
          `"sequence_id":${ids[w]}${flags},"binary_data_output":true`,
        );
        const res = await http.post(
          `/v2/models/${model}/infer`,
          { "inference-header-content-length": String(headerLength) },
          body,
        );
        if (res.status !== 200) throw new Error(res.body.toString());
      });
      http.close();
      return result;
    };

    const statsNote = async (model: string) => {
      const stats = (await (
        await fetch(`http://127.0.0.1:${server.httpPort}/v2/models/${model}/stats`)
      ).json()) as {
        model_stats: {
          execution_count: number;
          inference_count: number;
          batch_stats: { batch_size: number; compute_infer: { count: number } }[];
        }[];
      };
      const s = stats.model_stats[0]!;
      const histogram = s.batch_stats.map((b) => `${b.batch_size}:${b.compute_infer.count}`).join(" ");
      return { histogram, meanBatch: s.inference_count / Math.max(1, s.execution_count) };
    };

    if (wanted("http-binary-stateful")) {
      // Measure state memory while the sequences are live: a second pass holds them open.
      const result = await statefulHttp("silero_vad_stateful");
      const { histogram, meanBatch } = await statsNote("silero_vad_stateful");
      report(
        "http-binary-stateful",
        result,
        `${SEQUENCES} sequences, Oldest, mean batch ${meanBatch.toFixed(1)}`,
      );
      process.stdout.write(`  batch-size histogram (size:executions): ${histogram}\n`);
    }
    if (wanted("http-binary-stateful-nobatch")) {
      const result = await statefulHttp("silero_vad_stateful_nobatch");
      report("http-binary-stateful-nobatch", result, `${SEQUENCES} sequences, max_batch_size 1`);
    }

    if (wanted("grpc-unary-stateful")) {
      const grpc = new GrpcClient(server.grpcPort);
      const ids = Array.from({ length: SEQUENCES }, () => nextId++);
      const started = new Array<boolean>(SEQUENCES).fill(false);
      let n = 0;
      const result = await runLoops(SEQUENCES, SECONDS, WARMUP, async (w, last) => {
        await grpc.infer(
          encodeGrpcRequest({
            model: "silero_vad_stateful",
            id: "",
            inputs: [
              { name: "input", datatype: "FP32", shape: [1, CHUNK] },
              { name: "sr", datatype: "INT64", shape: [] },
            ],
            raw: [bytesOf(chunks[n++ % chunks.length]!), srBytes],
            sequenceId: ids[w]!,
            start: !started[w],
            end: last,
          }),
        );
        started[w] = true;
      });
      grpc.close();
      report("grpc-unary-stateful", result, `${SEQUENCES} sequences, ModelInfer`);
    }

    if (wanted("grpc-stream-stateful")) {
      const grpc = new GrpcClient(server.grpcPort);
      const STREAMS = 16;
      const perStream = SEQUENCES / STREAMS;
      const ids = Array.from({ length: SEQUENCES }, () => nextId++);
      const started = new Array<boolean>(SEQUENCES).fill(false);
      const waiters = new Map<string, () => void>();
      const streams = Array.from({ length: STREAMS }, () =>
        grpc.stream((response) => {
          const waiter = waiters.get(response.id);
          waiters.delete(response.id);
          waiter?.();
        }),
      );
      let n = 0;
      const result = await runLoops(SEQUENCES, SECONDS, WARMUP, (w, last) => {
        const id = String(w);
        const done = new Promise<void>((resolve) => waiters.set(id, resolve));
        streams[Math.floor(w / perStream)]!.write(
          encodeGrpcRequest({
            model: "silero_vad_stateful",
            id,
            inputs: [
              { name: "input", datatype: "FP32", shape: [1, CHUNK] },
              { name: "sr", datatype: "INT64", shape: [] },
            ],
            raw: [bytesOf(chunks[n++ % chunks.length]!), srBytes],
            sequenceId: ids[w]!,
            start: !started[w],
            end: last,
          }),
        );
        started[w] = true;
        return done;
      });
      for (const s of streams) s.end();
      grpc.close();
      report(
        "grpc-stream-stateful",
        result,
        `${SEQUENCES} sequences over ${STREAMS} ModelStreamInfer streams`,
      );
    }

    if (wanted("ws-stateful")) {
      const sockets = await Promise.all(
        Array.from({ length: SEQUENCES }, () =>
          WsSequenceClient.open(server.httpPort, "silero_vad_stateful"),
        ),
      );
      let n = 0;
      const result = await runLoops(SEQUENCES, SECONDS, WARMUP, async (w) => {
        await sockets[w]!.send([bytesOf(chunks[n++ % chunks.length]!), srBytes]);
      });
      await Promise.all(sockets.map((s) => s.close()));
      report("ws-stateful", result, `${SEQUENCES} sequences, one WebSocket each`);
    }

    const sileroInputs = (chunk: Float32Array) => [
      { name: "input", datatype: "FP32", shape: [1, CHUNK], bytes: bytesOf(chunk) },
      { name: "sr", datatype: "INT64", shape: [], bytes: srBytes },
    ];

    if (wanted("sagemaker-stateful")) {
      const http = new HttpClient(server.sagemakerPort!, SEQUENCES);
      const sessions = await Promise.all(
        Array.from({ length: SEQUENCES }, () => openSession(http, "silero_vad_stateful")),
      );
      let n = 0;
      const result = await runLoops(SEQUENCES, SECONDS, WARMUP, async (w) => {
        await sessionStep(http, sessions[w]!, sileroInputs(chunks[n++ % chunks.length]!));
      });
      await Promise.all(sessions.map((id) => closeSession(http, id)));
      http.close();
      const { meanBatch } = await statsNote("silero_vad_stateful");
      report(
        "sagemaker-stateful",
        result,
        `${SEQUENCES} sessions over POST /invocations, mean batch ${meanBatch.toFixed(1)} (cumulative)`,
      );
    }

    if (wanted("session-step-overhead")) {
      // The same step of one stateful stream, one request at a time on one keep-alive
      // connection: through the KServe path and through a SageMaker session. Slices of
      // each alternate, so both see the same machine state; the difference is what the
      // SageMaker path adds per request (session lookup, body forms, answer choice).
      const kserve = new HttpClient(server.httpPort, 1);
      const sagemaker = new HttpClient(server.sagemakerPort!, 1);
      const session = await openSession(sagemaker, "silero_vad_stateful");
      const id = nextId++;
      let started = false;
      let n = 0;
      const kserveStep = async () => {
        const { body, headerLength } = binaryRequest(
          sileroInputs(chunks[n++ % chunks.length]!),
          `"sequence_id":${id}${started ? "" : ',"sequence_start":true'},"binary_data_output":true`,
        );
        started = true;
        const res = await kserve.post(
          "/v2/models/silero_vad_stateful/infer",
          { "inference-header-content-length": String(headerLength) },
          body,
        );
        if (res.status !== 200) throw new Error(res.body.toString());
      };
      const sagemakerStep = () => sessionStep(sagemaker, session, sileroInputs(chunks[n++ % chunks.length]!));
      const SLICES = 8;
      const totals = { kserve: { requests: 0, seconds: 0 }, sagemaker: { requests: 0, seconds: 0 } };
      for (let slice = 0; slice < SLICES; slice++) {
        for (const [path, step] of [
          ["kserve", kserveStep],
          ["sagemaker", sagemakerStep],
        ] as const) {
          const r = await runLoops(1, SECONDS / SLICES, slice === 0 ? WARMUP / 2 : 0, async () => {
            await step();
          });
          totals[path].requests += r.requests;
          totals[path].seconds += r.seconds;
        }
      }
      await closeSession(sagemaker, session);
      kserve.close();
      sagemaker.close();
      const us = (t: { requests: number; seconds: number }) => (t.seconds * 1e6) / t.requests;
      const k = us(totals.kserve);
      const m = us(totals.sagemaker);
      process.stdout.write(
        `session-step-overhead: one request at a time, Silero VAD step, binary tensors\n` +
          `  /v2/models/{m}/infer (sequence parameters)  ${k.toFixed(0).padStart(6)} µs/step  (${totals.kserve.requests} steps)\n` +
          `  /invocations (SageMaker session)           ${m.toFixed(0).padStart(6)} µs/step  (${totals.sagemaker.requests} steps)\n` +
          `  difference                                  ${(m - k).toFixed(0).padStart(6)} µs/step (${(((m - k) / k) * 100).toFixed(1)} %)\n`,
      );
      results.push({
        scenario: "session-step-overhead-kserve",
        chunksPerSecond: 1e6 / k,
        note: "1 request at a time",
      });
      results.push({
        scenario: "session-step-overhead-sagemaker",
        chunksPerSecond: 1e6 / m,
        note: "1 request at a time",
      });
    }

    if (wanted("state-memory")) {
      // State kept per live sequence: start SEQUENCES sequences, read the summary, end them.
      const http = new HttpClient(server.httpPort, 64);
      const ids = Array.from({ length: SEQUENCES }, () => nextId++);
      for (const id of ids) {
        const { body, headerLength } = binaryRequest(
          [
            { name: "input", datatype: "FP32", shape: [1, CHUNK], bytes: bytesOf(chunks[0]!) },
            { name: "sr", datatype: "INT64", shape: [], bytes: srBytes },
          ],
          `"sequence_id":${id},"sequence_start":true`,
        );
        await http.post(
          "/v2/models/silero_vad_stateful/infer",
          { "inference-header-content-length": String(headerLength) },
          body,
        );
      }
      const summary = (await (
        await fetch(`http://127.0.0.1:${server.httpPort}/v2/models/silero_vad_stateful/sequences`)
      ).json()) as {
        summary: { live: number; state_bytes: number };
      };
      process.stdout.write(
        `state memory: ${summary.summary.live} live sequences hold ${summary.summary.state_bytes} bytes of state = ${(summary.summary.state_bytes / Math.max(1, summary.summary.live)).toFixed(0)} bytes per sequence\n`,
      );
      for (const id of ids)
        await fetch(`http://127.0.0.1:${server.httpPort}/v2/models/silero_vad_stateful/sequences/${id}`, {
          method: "DELETE",
        });
      http.close();
    }
  } finally {
    await server.stop();
    rmSync(repo, { recursive: true, force: true });
  }
  process.stdout.write(`${JSON.stringify({ seconds: SECONDS, sequences: SEQUENCES, results })}\n`);
}

await main();
