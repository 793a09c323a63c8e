// A SageMaker stateful session with the AWS SDK for JavaScript, pointed at seqserve.
//
//   npx seqserve --model-repository examples/models --allow-sagemaker true   # one terminal
//   node --import tsx examples/clients/sagemaker-session.ts [host:port]
//
// It opens a session on the `accumulator` example model with its first value, sends more
// values that add to the sum the server keeps for the session, and closes the session
// with the last one. Against a real endpoint, drop `endpoint` and `credentials`.
import { InvokeEndpointCommand, SageMakerRuntimeClient } from "@aws-sdk/client-sagemaker-runtime";

const address = process.argv[2] ?? "127.0.0.1:8080";
const client = new SageMakerRuntimeClient({
  endpoint: `http://${address}`,
  region: "us-east-1",
  credentials: { accessKeyId: "any", secretAccessKey: "any" }, // seqserve does not check signatures
});

const invoke = (body: unknown, sessionId: string) =>
  client.send(
    new InvokeEndpointCommand({
      EndpointName: "seqserve",
      TargetModel: "accumulator",
      ContentType: "application/json",
      SessionId: sessionId,
      Body: Buffer.from(JSON.stringify(body)),
    }),
  );
const input = (value: number) => [{ name: "INPUT", datatype: "INT32", shape: [1, 1], data: [value] }];
const sumOf = (answer: { Body?: Uint8Array }) =>
  (JSON.parse(Buffer.from(answer.Body!).toString()) as { outputs: { data: number[] }[] }).outputs[0]!.data[0];

const [first, ...rest] = [5, 3, 10, 2, 7];
const opened = await invoke({ requestType: "NEW_SESSION", inputs: input(first!) }, "NEW_SESSION");
const sessionId = opened.NewSessionId!.split(";")[0]!; // "<id>; Expires=2026-01-01T12:20:00Z"
console.log(`running sum: ${sumOf(opened)}`);
for (const [i, value] of rest.entries()) {
  const last = i === rest.length - 1;
  const answer = await invoke(
    last ? { requestType: "CLOSE", inputs: input(value) } : { inputs: input(value) },
    sessionId,
  );
  console.log(`running sum: ${sumOf(answer)}`);
  if (last) console.log(`closed: ${answer.ClosedSessionId === sessionId}`);
}
client.destroy();
