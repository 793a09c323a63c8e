import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { Metadata, status } from "@grpc/grpc-js";
import { ERROR_CODES, type ErrorCode } from "../../src/core/errors.ts";
import { KSERVE_GRPC_STATUS } from "../../src/frontends/common/kserve/error-status.ts";
import type { InferParameterMessage, ModelInferResponseMessage } from "../../src/frontends/grpc/messages.ts";
import { DeclaredModel, UINT64_MAX } from "./support/fake-context.ts";
import { callError, type Harness, startServer } from "./support/grpc-harness.ts";

// ModelInfer over a real socket: every datatype through raw and typed contents, the
// errors that name the input at fault, parameters (sequence ids included), the error
// status table, and cancellation.

let h: Harness;
before(async () => {
  h = await startServer();
  // A model that declares its inputs: the fakes take any, where a model's checks name them.
  h.context.registry.models.set(
    "declared",
    new DeclaredModel("declared", [
      ["r", "FP32", [3]],
      ["a", "INT32", [1]],
    ]),
  );
});
after(() => h.stop());

/** Tests that wait for an event fail after this instead of hanging when it never comes. */
const WAIT = { timeout: 20_000 };

type Response = Required<Pick<ModelInferResponseMessage, "outputs" | "raw_output_contents">> &
  ModelInferResponseMessage;

const infer = (request: object): Promise<Response> => h.client.unary<Response>("ModelInfer", request);

const bytesOf = (array: ArrayBufferView): Buffer =>
  Buffer.from(array.buffer, array.byteOffset, array.byteLength);

function rawBytesElements(elements: readonly string[]): Buffer {
  return Buffer.concat(
    elements.flatMap((e) => {
      const bytes = Buffer.from(e);
      const length = Buffer.alloc(4);
      length.writeUInt32LE(bytes.length);
      return [length, bytes];
    }),
  );
}

interface Case {
  readonly datatype: string;
  /** The expected raw (little-endian) layout of the three elements. */
  readonly raw: Buffer;
  /** The typed contents carrying the same three elements; undefined for FP16/BF16. */
  readonly contents?: Record<string, unknown[]>;
}

const CASES: readonly Case[] = [
  { datatype: "BOOL", raw: Buffer.from([1, 0, 1]), contents: { bool_contents: [true, false, true] } },
  { datatype: "UINT8", raw: bytesOf(Uint8Array.of(0, 255, 7)), contents: { uint_contents: [0, 255, 7] } },
  {
    datatype: "UINT16",
    raw: bytesOf(Uint16Array.of(0, 65535, 9)),
    contents: { uint_contents: [0, 65535, 9] },
  },
  {
    datatype: "UINT32",
    raw: bytesOf(Uint32Array.of(0, 4294967295, 1)),
    contents: { uint_contents: [0, 4294967295, 1] },
  },
  {
    datatype: "UINT64",
    raw: bytesOf(BigUint64Array.of(0n, UINT64_MAX, 5n)),
    contents: { uint64_contents: ["0", "18446744073709551615", "5"] },
  },
  { datatype: "INT8", raw: bytesOf(Int8Array.of(-128, 127, 0)), contents: { int_contents: [-128, 127, 0] } },
  {
    datatype: "INT16",
    raw: bytesOf(Int16Array.of(-32768, 32767, 1)),
    contents: { int_contents: [-32768, 32767, 1] },
  },
  {
    datatype: "INT32",
    raw: bytesOf(Int32Array.of(-2147483648, 2147483647, 3)),
    contents: { int_contents: [-2147483648, 2147483647, 3] },
  },
  {
    datatype: "INT64",
    raw: bytesOf(BigInt64Array.of(-(2n ** 63n), 2n ** 63n - 1n, 1n)),
    contents: { int64_contents: ["-9223372036854775808", "9223372036854775807", "1"] },
  },
  { datatype: "FP16", raw: bytesOf(Uint16Array.of(0x3c00, 0xc000, 0x7bff)) },
  { datatype: "BF16", raw: bytesOf(Uint16Array.of(0x3f80, 0xc000, 0x7f7f)) },
  {
    datatype: "FP32",
    raw: bytesOf(Float32Array.of(1.5, -2.25, 3e10)),
    contents: { fp32_contents: [1.5, -2.25, 3e10] },
  },
  {
    datatype: "FP64",
    raw: bytesOf(Float64Array.of(Math.PI, -1e300, 0)),
    contents: { fp64_contents: [Math.PI, -1e300, 0] },
  },
  {
    datatype: "BYTES",
    raw: rawBytesElements(["hello", "", "wörld"]),
    contents: { bytes_contents: [Buffer.from("hello"), Buffer.from(""), Buffer.from("wörld")] },
  },
];

test("every datatype round-trips through raw_input_contents, outputs come back raw", async () => {
  const response = await infer({
    model_name: "echo",
    id: "raw-all",
    inputs: CASES.map((c) => ({ name: `in_${c.datatype}`, datatype: c.datatype, shape: [1, 3] })),
    raw_input_contents: CASES.map((c) => c.raw),
  });
  assert.equal(response.id, "raw-all");
  assert.equal(response.model_name, "echo");
  assert.equal(response.model_version, "1");
  assert.equal(response.outputs.length, CASES.length);
  CASES.forEach((c, i) => {
    const output = response.outputs[i];
    assert.deepEqual(
      { name: output?.name, datatype: output?.datatype, shape: output?.shape },
      { name: `in_${c.datatype}`, datatype: c.datatype, shape: ["1", "3"] },
    );
    assert.deepEqual(Buffer.from(response.raw_output_contents[i]!), c.raw, c.datatype);
    assert.equal(output?.contents, undefined, "outputs travel raw, not as typed contents");
  });
});

test("every datatype with a typed field round-trips through contents", async () => {
  const typed = CASES.filter((c) => c.contents !== undefined);
  const response = await infer({
    model_name: "echo",
    inputs: typed.map((c) => ({
      name: `in_${c.datatype}`,
      datatype: c.datatype,
      shape: [3],
      contents: c.contents,
    })),
  });
  typed.forEach((c, i) => {
    assert.equal(response.outputs[i]?.datatype, c.datatype);
    assert.deepEqual(Buffer.from(response.raw_output_contents[i]!), c.raw, c.datatype);
  });
});

test("requested outputs select and order the response", async () => {
  const response = await infer({
    model_name: "echo",
    inputs: [
      { name: "a", datatype: "INT32", shape: [1], contents: { int_contents: [1] } },
      { name: "b", datatype: "INT32", shape: [1], contents: { int_contents: [2] } },
    ],
    outputs: [{ name: "b" }],
  });
  assert.deepEqual(
    response.outputs.map((o) => o.name),
    ["b"],
  );
  assert.deepEqual(Buffer.from(response.raw_output_contents[0]!), bytesOf(Int32Array.of(2)));
});

test("a zero-element tensor is valid", async () => {
  const response = await infer({
    model_name: "echo",
    inputs: [{ name: "e", datatype: "FP32", shape: [0, 4], contents: {} }],
  });
  assert.deepEqual(response.outputs[0]?.shape, ["0", "4"]);
  assert.equal(response.raw_output_contents[0]?.length, 0);
});

test("shared memory is refused with UNIMPLEMENTED, not ignored", async () => {
  const input = { name: "a", datatype: "INT32", shape: [1], contents: { int_contents: [1] } };
  const refused = async (request: object, details: string): Promise<void> => {
    const error = await callError(infer({ model_name: "echo", ...request }));
    assert.equal(error.code, status.UNIMPLEMENTED, error.details);
    assert.equal(error.details, details);
  };
  // Served as if absent, a shared-memory client would read a region nobody wrote.
  await refused(
    {
      inputs: [input],
      outputs: [{ name: "a", parameters: { shared_memory_region: { string_param: "out" } } }],
    },
    "shared memory is not supported: output 'a' sets 'shared_memory_region'",
  );
  await refused(
    {
      inputs: [
        {
          name: "a",
          datatype: "INT32",
          shape: [1],
          parameters: {
            shared_memory_region: { string_param: "in" },
            shared_memory_byte_size: { int64_param: 4 },
          },
        },
      ],
    },
    "shared memory is not supported: input 'a' sets 'shared_memory_region'",
  );
});

async function invalid(request: object, pattern: RegExp): Promise<void> {
  const error = await callError(infer(request));
  assert.equal(error.code, status.INVALID_ARGUMENT, error.details);
  assert.match(error.details, pattern);
}

test("bad inputs are refused with INVALID_ARGUMENT naming the input", async () => {
  const fp32 = (name: string, contents: object): object => ({ name, datatype: "FP32", shape: [2], contents });
  await invalid(
    {
      model_name: "echo",
      inputs: [fp32("mixed", { fp32_contents: [1, 2] })],
      raw_input_contents: [bytesOf(Float32Array.of(1, 2))],
    },
    /contents field must not be specified when using raw_input_contents for 'mixed'/,
  );
  await invalid(
    { model_name: "echo", inputs: [fp32("short", { fp32_contents: [1] })] },
    /'short'.*1 values in fp32_contents, but shape \[2\] needs 2/,
  );
  await invalid(
    {
      model_name: "echo",
      inputs: [{ name: "i8", datatype: "INT8", shape: [2], contents: { int_contents: [1, 200] } }],
    },
    /value 200 at index 1 of input 'i8'.*out of range for INT8/,
  );
  await invalid(
    {
      model_name: "echo",
      inputs: [{ name: "u16", datatype: "UINT16", shape: [1], contents: { uint_contents: [70000] } }],
    },
    /input 'u16'.*out of range for UINT16/,
  );
  await invalid(
    {
      model_name: "echo",
      inputs: [{ name: "u8", datatype: "UINT8", shape: [1], contents: { int_contents: [-1] } }],
    },
    /input tensor 'u8'.*int_contents given for datatype 'UINT8', expected uint_contents/,
  );
  await invalid(
    {
      model_name: "echo",
      inputs: [{ name: "h", datatype: "FP16", shape: [1], contents: { fp32_contents: [1] } }],
    },
    /input 'h'.*FP16.*raw_input_contents/,
  );
  await invalid(
    {
      model_name: "declared",
      id: "q1",
      inputs: [{ name: "r", datatype: "FP32", shape: [3] }],
      raw_input_contents: [bytesOf(Float32Array.of(1, 2))],
    },
    /^\[request id: q1\] input byte size mismatch for input 'r' for model 'declared'\. Expected 12, got 8$/,
  );
  // Triton's order: the datatype before the byte size.
  await invalid(
    {
      model_name: "declared",
      inputs: [{ name: "r", datatype: "INT32", shape: [3] }],
      raw_input_contents: [bytesOf(Float32Array.of(1, 2))],
    },
    /^\[request id: <id_unknown>\] inference input 'r' data-type is 'INT32', but model 'declared' expects 'FP32'$/,
  );
  await invalid(
    {
      model_name: "echo",
      inputs: [{ name: "d", datatype: "FLOAT", shape: [1], contents: { fp32_contents: [1] } }],
    },
    /invalid datatype 'FLOAT' for input 'd'/,
  );
  await invalid(
    { model_name: "echo", inputs: [{ name: "none", datatype: "FP32", shape: [1] }] },
    /unable to find data for input tensor 'none'/,
  );
  await invalid(
    { model_name: "echo", inputs: [{ name: "neg", datatype: "FP32", shape: [-1], contents: {} }] },
    /input 'neg'.*invalid shape \[-1\]/,
  );
  await invalid(
    {
      model_name: "echo",
      inputs: [
        { name: "a", datatype: "FP32", shape: [1] },
        { name: "b", datatype: "FP32", shape: [1] },
      ],
      raw_input_contents: [bytesOf(Float32Array.of(1))],
    },
    /expected 2 raw_input_contents for the 2 inputs/,
  );
  await invalid(
    {
      model_name: "echo",
      inputs: [fp32("twice", { fp32_contents: [1, 2] }), fp32("twice", { fp32_contents: [1, 2] })],
    },
    /input 'twice' is given more than once/,
  );
});

test("sequence_id is read from int64 bits, uint64 or string; flags from bool", async () => {
  const recorder = h.context.registry.recorder;
  recorder.requests.length = 0;
  const send = (parameters: Record<string, InferParameterMessage>) =>
    infer({ model_name: "recorder", parameters, inputs: [] });
  await send({ sequence_id: { int64_param: "-1" }, sequence_start: { bool_param: true } });
  await send({ sequence_id: { int64_param: "42" }, sequence_end: { bool_param: true } });
  await send({ sequence_id: { uint64_param: "18446744073709551615" } });
  await send({ sequence_id: { string_param: "session-7" }, timeout: { int64_param: "5000" } });
  assert.deepEqual(
    recorder.requests.map((r) => r.sequence),
    [
      { id: UINT64_MAX, start: true, end: false, timeoutUs: undefined },
      { id: 42n, start: false, end: true, timeoutUs: undefined },
      { id: UINT64_MAX, start: false, end: false, timeoutUs: undefined },
      { id: "session-7", start: false, end: false, timeoutUs: 5000 },
    ],
  );
  assert.equal(recorder.requests[0]?.parameters.sequence_id, UINT64_MAX);
  const wrongId = await callError(send({ sequence_id: { bool_param: true } }));
  assert.equal(wrongId.code, status.INVALID_ARGUMENT);
  assert.match(wrongId.details, /invalid value type for 'sequence_id' parameter/);
  const wrongFlag = await callError(
    send({ sequence_id: { int64_param: "1" }, sequence_start: { int64_param: "1" } }),
  );
  assert.equal(wrongFlag.details, "invalid value type for 'sequence_start' parameter, expected bool_param.");
  // `priority`: int64 (not negative) or uint64, as Triton reads it.
  await send({ priority: { uint64_param: "2" } });
  assert.equal(recorder.requests.at(-1)?.parameters.priority, 2);
  for (const [parameter, details] of [
    [{ int64_param: "-1" }, "invalid value for 'priority', expected value >= 0."],
    [
      { string_param: "1" },
      "invalid value type for 'priority' parameter, expected int64_param or uint64_param.",
    ],
  ] as const) {
    const wrong = await callError(send({ priority: parameter }));
    assert.deepEqual([wrong.code, wrong.details], [status.INVALID_ARGUMENT, details]);
  }
  // Of Triton's own parameter names, a request may set only those Triton reserves for requests.
  const reserved = await callError(send({ triton_other: { bool_param: true } }));
  assert.equal(reserved.code, status.INVALID_ARGUMENT);
  assert.equal(
    reserved.details,
    "parameter keys starting with 'triton_' are reserved for Triton usage. Only the following keys starting with 'triton_' are allowed: triton_enable_empty_final_response",
  );
  await send({ triton_enable_empty_final_response: { bool_param: true } });
});

test("parameters round-trip; a server-assigned uint64 id comes back as int64 bits", async () => {
  const response = await infer({
    model_name: "recorder",
    id: "p",
    parameters: {
      sequence_start: { bool_param: true },
      flag: { bool_param: false },
      count: { int64_param: "7" },
      large: { int64_param: "9007199254740993" },
      ratio: { double_param: 0.5 },
      label: { string_param: "x" },
      unsigned: { uint64_param: "12" },
    },
    inputs: [],
  });
  const request = h.context.registry.recorder.requests.at(-1);
  assert.equal(request?.parameters.large, 9007199254740993n);
  assert.equal(request?.parameters.count, 7);
  const p = response.parameters ?? {};
  assert.equal(p.flag?.bool_param, false);
  assert.equal(p.count?.int64_param, "7");
  assert.equal(p.large?.int64_param, "9007199254740993");
  assert.equal(p.ratio?.double_param, 0.5);
  assert.equal(p.label?.string_param, "x");
  assert.equal(p.unsigned?.int64_param, "12");
  assert.equal(p.sequence_id?.parameter_choice, "int64_param");
  assert.equal(BigInt.asUintN(64, BigInt(p.sequence_id?.int64_param as string)), UINT64_MAX);
});

test("every error code maps through the one table, with the message in the details", async () => {
  const expected: Record<ErrorCode, status> = {
    INVALID_ARG: status.INVALID_ARGUMENT,
    NOT_FOUND: status.NOT_FOUND,
    ALREADY_EXISTS: status.ALREADY_EXISTS,
    FAILED_PRECONDITION: status.FAILED_PRECONDITION,
    UNAVAILABLE: status.UNAVAILABLE,
    DEADLINE_EXCEEDED: status.DEADLINE_EXCEEDED,
    UNSUPPORTED: status.UNIMPLEMENTED,
    INTERNAL: status.INTERNAL,
    CANCELLED: status.CANCELLED,
    RESOURCE_EXHAUSTED: status.RESOURCE_EXHAUSTED,
    UNAUTHENTICATED: status.UNAUTHENTICATED,
    PERMISSION_DENIED: status.PERMISSION_DENIED,
    UNKNOWN: status.UNKNOWN,
  };
  assert.deepEqual(KSERVE_GRPC_STATUS, expected);
  for (const code of ERROR_CODES) {
    const error = await callError(
      infer({ model_name: "fail", parameters: { code: { string_param: code } }, inputs: [] }),
    );
    assert.equal(error.code, expected[code], code);
    assert.equal(error.details, `failing as asked with ${code}`);
    if (code === "UNAVAILABLE") {
      assert.ok(error.metadata instanceof Metadata);
      assert.deepEqual(error.metadata.get("grpc-retry-pushback-ms"), ["2000"]);
    }
  }
});

test("an unknown model or version is NOT_FOUND", async () => {
  const unknown = await callError(infer({ model_name: "nope", inputs: [] }));
  assert.equal(unknown.code, status.NOT_FOUND);
  assert.equal(unknown.details, "Request for unknown model: 'nope' is not found");
  const version = await callError(infer({ model_name: "echo", model_version: "3", inputs: [] }));
  assert.equal(version.code, status.NOT_FOUND);
  assert.match(version.details, /version 3/);
  assert.equal((await infer({ model_name: "echo", model_version: "1", inputs: [] })).model_version, "1");
});

test(
  "a status that would echo a client's long name or shape is cut short, and still arrives",
  WAIT,
  async () => {
    // The message travels in a trailer: past the client's metadata limit, no status at all.
    const name = "m".repeat(200_000);
    const unknown = await callError(infer({ model_name: name, inputs: [] }));
    assert.equal(unknown.code, status.NOT_FOUND);
    assert.ok(Buffer.byteLength(unknown.details) <= 2048, `${unknown.details.length} characters`);
    assert.match(unknown.details, /^Request for unknown model: 'mmm.*\.\.\.$/);
    const shape = new Array(60_000).fill(1);
    const wrong = await callError(
      infer({
        model_name: "declared",
        inputs: [{ name: "a", datatype: "INT32", shape }],
        raw_input_contents: [Buffer.alloc(8)],
      }),
    );
    assert.equal(wrong.code, status.INVALID_ARGUMENT);
    assert.equal(
      wrong.details,
      "[request id: <id_unknown>] unexpected shape for input 'a' for model 'declared'. Expected [1], got [1,1,1,1,1,1,1,1,...(60000 dimensions)...,1,1].",
    );
  },
);

test("cancelling a unary call aborts its request's signal", WAIT, async () => {
  const slow = h.context.registry.slow;
  const before = slow.held.length;
  const { call, response } = h.client.start("ModelInfer", { model_name: "slow", id: "c", inputs: [] });
  await slow.waitForHeld(before + 1);
  const held = slow.held[before]!;
  const signal = held.request.signal;
  assert.ok(signal !== undefined && !signal.aborted);
  const aborted = new Promise((resolve) => signal.addEventListener("abort", resolve, { once: true }));
  call.cancel();
  assert.equal((await callError(response)).code, status.CANCELLED);
  await aborted;
  assert.equal(held.aborted, true);
  assert.equal(signal.reason?.code, "CANCELLED");
});

test("the classification extension: an output's top classes as BYTES 'value:index', largest first", async () => {
  const response = await infer({
    model_name: "echo",
    inputs: [{ name: "a", datatype: "INT32", shape: [4], contents: { int_contents: [3, 9, 1, 9] } }],
    outputs: [{ name: "a", parameters: { classification: { int64_param: 2 } } }],
  });
  assert.equal(response.outputs[0]?.datatype, "BYTES");
  assert.deepEqual(response.outputs[0]?.shape, ["2"]);
  const raw = Buffer.from(response.raw_output_contents[0]!);
  // BYTES raw contents: each element a 4-byte little-endian length, then its bytes.
  const strings: string[] = [];
  for (let at = 0; at < raw.length; ) {
    const length = raw.readUInt32LE(at);
    strings.push(raw.subarray(at + 4, at + 4 + length).toString());
    at += 4 + length;
  }
  assert.deepEqual(strings, ["9:1", "9:3"]);
});
