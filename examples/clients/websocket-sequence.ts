// A stateful sequence over a WebSocket: one connection is one sequence.
//
//   npm start                                   # in one terminal
//   node --import tsx examples/clients/websocket-sequence.ts [host:port]
//
// It streams five values to the `accumulator` example model in the binary framing
// ([uint32 LE header length][JSON header][raw tensor bytes]), prints the running sum the
// server keeps between messages, then ends the sequence; the server closes with 1000.
import WebSocket from "ws";

const address = process.argv[2] ?? "127.0.0.1:8000";
const socket = new WebSocket(`ws://${address}/v2/models/accumulator/stream`);

/** One framed message carrying INPUT = value; the last one also ends the sequence. */
function frame(value: number, end = false): Buffer {
  const header = Buffer.from(
    JSON.stringify({
      ...(end ? { parameters: { sequence_end: true } } : {}),
      inputs: [{ name: "INPUT", datatype: "INT32", shape: [1, 1], parameters: { binary_data_size: 4 } }],
    }),
  );
  const prefix = Buffer.alloc(4);
  prefix.writeUInt32LE(header.byteLength);
  const input = Buffer.alloc(4);
  input.writeInt32LE(value);
  return Buffer.concat([prefix, header, input]);
}

const values = [5, 3, 10, 2, 7];
socket.on("open", () => {
  // Messages may go out at once: the server answers them in order.
  for (const [step, value] of values.entries()) socket.send(frame(value, step === values.length - 1));
});
socket.on("message", (data: Buffer, binary: boolean) => {
  if (!binary) {
    console.error("error:", data.toString()); // errors come as JSON text; the stream goes on
    return;
  }
  const length = data.readUInt32LE(0);
  const header = data.toString("utf8", 4, 4 + length);
  // Assigned ids are uint64 above 2^53: read the digits, JSON.parse would round them.
  const id = /"sequence_id":(\d+)/.exec(header)?.[1];
  if (id !== undefined) console.log(`sequence id: ${id}`);
  console.log(`running sum: ${data.readInt32LE(4 + length)}`);
});
socket.on("close", (code: number) => console.log(`closed: ${code}`));
socket.on("error", (error: Error) => {
  console.error(error.message);
  process.exitCode = 1;
});
