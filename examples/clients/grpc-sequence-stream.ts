// A stateful sequence over gRPC ModelStreamInfer with a plain grpc-js client generated
// from seqserve's proto files (the same messages as Triton's grpc_service.proto).
//
//   npm start                                   # in one terminal
//   node --import tsx examples/clients/grpc-sequence-stream.ts [host:port]
//
// It streams one sequence of five values to the `accumulator` example model and prints
// the running sum the server keeps between requests.
import { fileURLToPath } from "node:url";
import {
  type ClientDuplexStream,
  credentials,
  loadPackageDefinition,
  type ServiceClientConstructor,
} from "@grpc/grpc-js";
import { loadSync } from "@grpc/proto-loader";

const protoDir = fileURLToPath(new URL("../../proto/", import.meta.url));
const definition = loadSync("grpc_service.proto", {
  includeDirs: [protoDir],
  keepCase: true,
  longs: String,
  enums: String,
  defaults: true,
});
const inference = loadPackageDefinition(definition).inference as {
  GRPCInferenceService: ServiceClientConstructor;
};

interface InferResponse {
  outputs: { name: string }[];
  raw_output_contents: Buffer[];
}

const address = process.argv[2] ?? "127.0.0.1:8001";
const client = new inference.GRPCInferenceService(address, credentials.createInsecure());
// Generated clients carry one method per RPC; their static type cannot name them.
const stream = (
  client as unknown as { ModelStreamInfer(): ClientDuplexStream<object, object> }
).ModelStreamInfer();

const values = [5, 3, 10, 2, 7];
let answered = 0;
stream.on("data", (message: { error_message: string; infer_response: InferResponse }) => {
  if (message.error_message !== "") {
    console.error("error:", message.error_message);
  } else {
    const raw = message.infer_response.raw_output_contents[0]!;
    console.log(`running sum: ${raw.readInt32LE(0)}`);
  }
  if (++answered === values.length) stream.end();
});
stream.on("end", () => client.close());

values.forEach((value, step) => {
  const raw = Buffer.alloc(4);
  raw.writeInt32LE(value);
  stream.write({
    model_name: "accumulator",
    id: `step-${step}`,
    parameters: {
      // Triton clients send the correlation id as int64_param; string_param works too.
      sequence_id: { int64_param: "1001" },
      sequence_start: { bool_param: step === 0 },
      sequence_end: { bool_param: step === values.length - 1 },
    },
    inputs: [{ name: "INPUT", datatype: "INT32", shape: [1, 1] }],
    raw_input_contents: [raw],
  });
});
