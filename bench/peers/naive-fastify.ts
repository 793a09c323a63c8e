// The server a user would write in an afternoon with fastify and onnxruntime-node, for
// the performance comparison (docs/performance.md): Silero VAD v5 behind KServe v2's
// JSON and binary infer endpoints, the client passing the recurrent state with every
// chunk, ONNX Runtime called in the request handler, batch 1.
//
//   node --import tsx bench/peers/naive-fastify.ts <port> <model.onnx>
// (prints "listening <port>" when ready)
import Fastify from "fastify";
import ort from "onnxruntime-node";

const [portArg, modelPath] = process.argv.slice(2);
const session = await ort.InferenceSession.create(modelPath!, { intraOpNumThreads: 1 });
const app = Fastify();
// Binary-extension bodies come with any or no Content-Type.
app.addContentTypeParser("*", { parseAs: "buffer" }, (_req, body, done) => done(null, body));

const metadata = {
  name: "silero_vad",
  versions: ["1"],
  platform: "onnxruntime_onnx",
  inputs: [
    { name: "input", datatype: "FP32", shape: [-1, 512] },
    { name: "state", datatype: "FP32", shape: [2, -1, 128] },
    { name: "sr", datatype: "INT64", shape: [] },
  ],
  outputs: [
    { name: "output", datatype: "FP32", shape: [-1, 1] },
    { name: "stateN", datatype: "FP32", shape: [2, -1, 128] },
  ],
};
app.get("/v2/models/silero_vad", async () => metadata);
app.get("/v2/models/silero_vad/config", async () => ({ name: "silero_vad", max_batch_size: 0 }));

interface JsonInput {
  name: string;
  shape: number[];
  data: number[];
}

app.post("/v2/models/silero_vad/infer", async (request, reply) => {
  const headerLength = request.headers["inference-header-content-length"];
  let inputs: JsonInput[];
  let raw: Buffer | undefined;
  if (headerLength !== undefined) {
    raw = request.body as Buffer;
    inputs = JSON.parse(raw.subarray(0, Number(headerLength)).toString()).inputs;
  } else {
    inputs = (request.body as { inputs: JsonInput[] }).inputs;
  }
  const feeds: Record<string, ort.Tensor> = {};
  let offset = Number(headerLength ?? 0);
  for (const input of inputs) {
    const count = input.shape.reduce((a, b) => a * b, 1);
    if (input.name === "sr") {
      feeds.sr = new ort.Tensor(
        "int64",
        BigInt64Array.of(raw ? raw.readBigInt64LE(offset) : BigInt(input.data[0]!)),
        [],
      );
      offset += 8;
    } else {
      const data = raw
        ? new Float32Array(raw.buffer.slice(raw.byteOffset + offset, raw.byteOffset + offset + count * 4))
        : Float32Array.from(input.data);
      offset += count * 4;
      feeds[input.name] = new ort.Tensor("float32", data, input.shape);
    }
  }
  const result = await session.run(feeds);
  const outputs = ["output", "stateN"].map((name) => ({ name, tensor: result[name]! }));
  if (raw === undefined) {
    return {
      model_name: "silero_vad",
      outputs: outputs.map(({ name, tensor }) => ({
        name,
        datatype: "FP32",
        shape: tensor.dims,
        data: Array.from(tensor.data as Float32Array),
      })),
    };
  }
  const header = Buffer.from(
    JSON.stringify({
      model_name: "silero_vad",
      outputs: outputs.map(({ name, tensor }) => ({
        name,
        datatype: "FP32",
        shape: tensor.dims,
        parameters: { binary_data_size: (tensor.data as Float32Array).byteLength },
      })),
    }),
  );
  const bodies = outputs.map(({ tensor }) => Buffer.from((tensor.data as Float32Array).buffer));
  reply.header("inference-header-content-length", header.byteLength).type("application/octet-stream");
  return Buffer.concat([header, ...bodies]);
});

await app.listen({ host: "127.0.0.1", port: Number(portArg ?? 0) });
const address = app.server.address();
process.stdout.write(
  `listening ${typeof address === "object" && address !== null ? address.port : portArg}\n`,
);
