import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import {
  closeSync,
  existsSync,
  ftruncateSync,
  openSync,
  readFileSync,
  readSync,
  rmSync,
  writeSync,
} from "node:fs";
import { after, afterEach, before, describe, it } from "node:test";
import { status } from "@grpc/grpc-js";
import { DEFAULT_LIMITS, DEFAULT_SECURITY_OPTIONS } from "../../src/config/security-options.ts";
import type {
  ModelInferRequestMessage,
  ModelInferResponseMessage,
} from "../../src/frontends/grpc/messages.ts";
import { addSubModel, identityModel } from "../../tools/onnx/test-models.ts";
import { callError, TestClient } from "../grpc/support/grpc-harness.ts";
import { rawBytes, rawOutput, StreamCall, sequenceParameters } from "../support/grpc-stream-call.ts";
import { getJson, postJson } from "../support/http-client.ts";
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
import { startTestServer, type TestServer } from "../support/test-server.ts";
import { simpleConfig } from "./support/serving.ts";

// Triton's system shared memory extension, as tritonclient's shared-memory utilities use
// it: the client creates a POSIX shared-memory object (a file in /dev/shm), registers
// slices of it as regions, and its requests name slices for inputs and outputs instead of
// carrying the bytes. Here the client's writes and reads of its mapping are writes and
// reads of that file, which is the same memory. Stateful Silero VAD sequences whose audio
// and answers travel through shared memory must answer bit for bit as ONNX Runtime run in
// this process does; errors are Triton's; a server launched without
// --allow-client-shm=true refuses registrations as Triton does.

const SHM_DIRECTORY = "/dev/shm";
const MODELS = {
  simple: { config: simpleConfig("simple"), onnx: addSubModel("INT32", [-1, 16]) },
  [SILERO_STATEFUL_MODEL]: { config: SILERO_STATEFUL_CONFIG, onnx: readFileSync(SILERO_PATH) },
};

/** A client's POSIX shared-memory object, created as shm_open + ftruncate would create it. */
class SharedObject {
  readonly key = `/seqserve-test-${randomUUID()}`;
  readonly #fd: number;

  constructor(byteSize: number) {
    this.#fd = openSync(`${SHM_DIRECTORY}${this.key}`, "wx+", 0o600);
    ftruncateSync(this.#fd, byteSize);
  }

  write(offset: number, bytes: ArrayBufferView): void {
    writeSync(
      this.#fd,
      new Uint8Array(bytes.buffer, bytes.byteOffset, bytes.byteLength),
      0,
      bytes.byteLength,
      offset,
    );
  }

  read(offset: number, byteSize: number): Buffer {
    const bytes = Buffer.alloc(byteSize);
    assert.equal(readSync(this.#fd, bytes, 0, byteSize, offset), byteSize);
    return bytes;
  }

  truncate(byteSize: number): void {
    ftruncateSync(this.#fd, byteSize);
  }

  /** As shm_unlink: the name goes; a server that opened the object keeps it. */
  unlink(): void {
    closeSync(this.#fd);
    rmSync(`${SHM_DIRECTORY}${this.key}`, { force: true });
  }
}

const int32Bytes = (values: readonly number[]): Buffer => rawBytes(Int32Array.from(values));
const int32s = (bytes: Buffer): number[] => [
  ...new Int32Array(bytes.buffer, bytes.byteOffset, bytes.byteLength / 4),
];
const ROW_A = Array.from({ length: 16 }, (_, i) => i * 3 - 7);
const ROW_B = Array.from({ length: 16 }, (_, i) => 100 - i);

const shmParameters = (region: string, byteSize: number, offset = 0) => ({
  shared_memory_region: { string_param: region },
  shared_memory_byte_size: { int64_param: byteSize },
  ...(offset === 0 ? {} : { shared_memory_offset: { int64_param: offset } }),
});

describe("system shared memory", {
  skip: !existsSync(SHM_DIRECTORY) && `${SHM_DIRECTORY} is missing`,
}, () => {
  let server: TestServer;
  let client: TestClient;
  const objects: SharedObject[] = [];
  const object = (byteSize: number): SharedObject => {
    const created = new SharedObject(byteSize);
    objects.push(created);
    return created;
  };

  before(async () => {
    server = await startTestServer(MODELS, { allowClientSharedMemory: true, exitTimeoutSecs: 1 });
    client = new TestClient(server.grpcPort);
  });
  after(async () => {
    client.close();
    await server.stop();
    for (const created of objects) created.unlink();
  });
  // Every request let go of the regions it used: unregistered, none is left waiting for one.
  afterEach(async () => {
    await client.unary("SystemSharedMemoryUnregister", {});
    const listed = await fetch(`${server.url}/v2/systemsharedmemory/status`).then((r) => r.json());
    assert.deepEqual(listed, [], "no region is still held by a request");
  });

  const register = (name: string, body: unknown) =>
    postJson(`${server.url}/v2/systemsharedmemory/region/${name}/register`, body);

  it("registers, lists and unregisters regions over HTTP and gRPC, and refuses what Triton refuses", async () => {
    const shared = object(8192);
    assert.equal((await register("in", { key: shared.key, offset: 0, byte_size: 128 })).status, 200);
    await client.unary("SystemSharedMemoryRegister", {
      name: "out",
      key: shared.key,
      offset: 4096,
      byte_size: 64,
    });

    const listed = await getJson(`${server.url}/v2/systemsharedmemory/status`);
    assert.equal(listed.status, 200);
    assert.deepEqual(
      (listed.body as unknown as object[]).toSorted((a, b) =>
        JSON.stringify(a).localeCompare(JSON.stringify(b)),
      ),
      [
        { name: "in", key: shared.key, offset: 0, byte_size: 128 },
        { name: "out", key: shared.key, offset: 4096, byte_size: 64 },
      ],
    );
    assert.deepEqual(await client.unary("SystemSharedMemoryStatus", { name: "out" }), {
      regions: { out: { name: "out", key: shared.key, offset: "4096", byte_size: "64" } },
    });

    // [region, body, status, error]
    const refusals: readonly [string, object, number, string][] = [
      ["in", { key: shared.key, byte_size: 8 }, 400, "shared memory region 'in' already in manager"],
      [
        "other",
        { key: "/seqserve-test-no-such-object", byte_size: 8 },
        500,
        "Unable to open shared memory region: '/seqserve-test-no-such-object'",
      ],
      // A key is a name in /dev/shm, never a path out of it.
      [
        "other",
        { key: "/../etc/passwd", byte_size: 8 },
        500,
        "Unable to open shared memory region: '/../etc/passwd'",
      ],
      [
        "other",
        { key: shared.key, offset: 8100, byte_size: 97 },
        400,
        "failed to register shared memory region 'other': invalid args",
      ],
      // What Triton's mmap of the region refuses (EINVAL): nothing to map, an offset off a page.
      [
        "other",
        { key: shared.key, offset: 0, byte_size: 0 },
        400,
        "failed to register shared memory region 'other': unable to process address spaceInvalid argument",
      ],
      [
        "other",
        { key: shared.key, offset: 100, byte_size: 8 },
        400,
        "failed to register shared memory region 'other': unable to process address spaceInvalid argument",
      ],
      [
        "other",
        { key: "/triton_python_backend_shm_region_1", byte_size: 8 },
        400,
        "cannot register shared memory region 'other' with key '/triton_python_backend_shm_region_1' as the key contains the reserved prefix 'triton_python_backend_shm_region_'",
      ],
      [
        "other",
        { key: "///", byte_size: 8 },
        400,
        "cannot register shared memory region 'other' - invalid shm key '///'",
      ],
      ["other", { byte_size: 8 }, 400, "Shared memory register request has no 'key' field"],
      ["other", { key: shared.key }, 400, "Shared memory register request has no 'byte_size' field"],
    ];
    for (const [name, body, code, error] of refusals) {
      const answer = await register(name, body);
      assert.deepEqual([answer.status, answer.body], [code, { error }], error);
    }
    const unnamed = await postJson(`${server.url}/v2/systemsharedmemory/register`, {
      key: shared.key,
      byte_size: 8,
    });
    assert.deepEqual(unnamed.body, {
      error: "'region name' is necessary to register system shared memory region",
    });

    const missing = await getJson(`${server.url}/v2/systemsharedmemory/region/nope/status`);
    assert.deepEqual(
      [missing.status, missing.body],
      [404, { error: "Unable to find system shared memory region: 'nope'" }],
    );
    const grpcMissing = await callError(client.unary("SystemSharedMemoryStatus", { name: "nope" }));
    assert.equal(grpcMissing.code, status.NOT_FOUND);

    // Unregistering a name that is not registered is no error, as in Triton.
    assert.equal(
      (await postJson(`${server.url}/v2/systemsharedmemory/region/nope/unregister`, {})).status,
      200,
    );
    assert.equal(
      (await postJson(`${server.url}/v2/systemsharedmemory/region/in/unregister`, {})).status,
      200,
    );
    assert.deepEqual(await client.unary("SystemSharedMemoryStatus", {}), {
      regions: { out: { name: "out", key: shared.key, offset: "4096", byte_size: "64" } },
    });
    await client.unary("SystemSharedMemoryUnregister", {});
    assert.deepEqual((await getJson(`${server.url}/v2/systemsharedmemory/status`)).body, []);
  });

  it("CUDA shared memory answers as a Triton without GPUs", async () => {
    const registered = await postJson(`${server.url}/v2/cudasharedmemory/region/gpu/register`, {
      raw_handle: { b64: "" },
      device_id: 0,
      byte_size: 64,
    });
    assert.deepEqual(
      [registered.status, registered.body],
      [400, { error: "failed to register CUDA shared memory region: 'gpu', GPUs not supported" }],
    );
    const grpcRegistered = await callError(
      client.unary("CudaSharedMemoryRegister", { name: "gpu", byte_size: 64 }),
    );
    assert.equal(grpcRegistered.code, status.INVALID_ARGUMENT);
    assert.deepEqual((await getJson(`${server.url}/v2/cudasharedmemory/status`)).body, []);
    assert.deepEqual(await client.unary("CudaSharedMemoryStatus", {}), { regions: {} });
    const missing = await getJson(`${server.url}/v2/cudasharedmemory/region/gpu/status`);
    assert.deepEqual(
      [missing.status, missing.body],
      [404, { error: "Unable to find cuda shared memory region: 'gpu'" }],
    );
    assert.equal((await postJson(`${server.url}/v2/cudasharedmemory/unregister`, {})).status, 200);
    const metadata = await getJson(`${server.url}/v2`);
    assert.ok((metadata.body.extensions as string[]).includes("system_shared_memory"));
  });

  it("reads inputs from and writes outputs to shared memory over HTTP, as Triton's simple shm example", async () => {
    const shared = object(8192);
    shared.write(0, int32Bytes(ROW_A));
    shared.write(64, int32Bytes(ROW_B));
    await register("simple_in", { key: shared.key, offset: 0, byte_size: 128 });
    await register("simple_out", { key: shared.key, offset: 4096, byte_size: 128 });
    const answer = await postJson(`${server.url}/v2/models/simple/infer`, {
      inputs: [
        {
          name: "INPUT0",
          datatype: "INT32",
          shape: [1, 16],
          parameters: { shared_memory_region: "simple_in", shared_memory_byte_size: 64 },
        },
        {
          name: "INPUT1",
          datatype: "INT32",
          shape: [1, 16],
          parameters: {
            shared_memory_region: "simple_in",
            shared_memory_offset: 64,
            shared_memory_byte_size: 64,
          },
        },
      ],
      outputs: [
        { name: "OUTPUT0", parameters: { shared_memory_region: "simple_out", shared_memory_byte_size: 64 } },
        {
          name: "OUTPUT1",
          parameters: {
            shared_memory_region: "simple_out",
            shared_memory_offset: 64,
            shared_memory_byte_size: 64,
          },
        },
      ],
    });
    assert.equal(answer.status, 200, JSON.stringify(answer.body));
    // The answer describes the outputs; their data is where the client asked.
    assert.deepEqual(answer.body.outputs, [
      { name: "OUTPUT0", datatype: "INT32", shape: [1, 16] },
      { name: "OUTPUT1", datatype: "INT32", shape: [1, 16] },
    ]);
    assert.deepEqual(
      int32s(shared.read(4096, 64)),
      ROW_A.map((a, i) => a + ROW_B[i]!),
    );
    assert.deepEqual(
      int32s(shared.read(4160, 64)),
      ROW_A.map((a, i) => a - ROW_B[i]!),
    );

    // One output in shared memory, the other in the answer; an input in JSON beside one in shared memory.
    const mixed = await postJson(`${server.url}/v2/models/simple/infer`, {
      inputs: [
        { name: "INPUT0", datatype: "INT32", shape: [1, 16], data: ROW_B },
        {
          name: "INPUT1",
          datatype: "INT32",
          shape: [1, 16],
          parameters: { shared_memory_region: "simple_in", shared_memory_byte_size: 64 },
        },
      ],
      outputs: [
        { name: "OUTPUT0" },
        { name: "OUTPUT1", parameters: { shared_memory_region: "simple_out", shared_memory_byte_size: 64 } },
      ],
    });
    assert.equal(mixed.status, 200, JSON.stringify(mixed.body));
    const outputs = mixed.body.outputs as { name: string; data?: number[] }[];
    assert.deepEqual(
      outputs[0]?.data,
      ROW_B.map((b, i) => b + ROW_A[i]!),
    );
    assert.equal(outputs[1]?.data, undefined);
    assert.deepEqual(
      int32s(shared.read(4096, 64)),
      ROW_B.map((b, i) => b - ROW_A[i]!),
    );
  });

  it("refuses what a request cannot take from shared memory, with Triton's messages, and keeps serving", async () => {
    const shared = object(256);
    await register("small", { key: shared.key, offset: 0, byte_size: 96 });
    const inferHttp = (input1: object, outputs?: object[]) =>
      postJson(`${server.url}/v2/models/simple/infer`, {
        inputs: [
          { name: "INPUT0", datatype: "INT32", shape: [1, 16], data: ROW_A },
          { name: "INPUT1", datatype: "INT32", shape: [1, 16], ...input1 },
        ],
        ...(outputs === undefined ? {} : { outputs }),
      });
    const refused = async (
      answer: Promise<{ status: number; body: unknown }>,
      code: number,
      error: string,
    ) => {
      const { status: got, body } = await answer;
      assert.deepEqual([got, body], [code, { error }]);
    };
    const shm = (parameters: object) => ({ parameters });
    await refused(
      inferHttp(shm({ shared_memory_region: "nope", shared_memory_byte_size: 64 })),
      404,
      "Unable to find shared memory region: 'nope'",
    );
    await refused(
      inferHttp(shm({ shared_memory_region: "small", shared_memory_offset: 96, shared_memory_byte_size: 0 })),
      400,
      "Invalid offset for shared memory region: 'small'",
    );
    await refused(
      inferHttp(
        shm({ shared_memory_region: "small", shared_memory_offset: 64, shared_memory_byte_size: 64 }),
      ),
      400,
      "Invalid offset + byte size for shared memory region: 'small'",
    );
    await refused(
      inferHttp(shm({ shared_memory_region: "small", shared_memory_byte_size: 60 })),
      400,
      "[request id: <id_unknown>] input byte size mismatch for input 'INPUT1' for model 'simple'. Expected 64, got 60",
    );
    await refused(
      inferHttp({ data: ROW_B, parameters: { shared_memory_region: "small", shared_memory_byte_size: 64 } }),
      400,
      "input 'INPUT1' must set exactly one of 'data', 'binary_data_size' in 'parameters' and 'shared_memory_region' in 'parameters', but sets 'data' and 'shared_memory_region'",
    );
    const out = (parameters: object) => [{ name: "OUTPUT0", parameters }];
    await refused(
      inferHttp(
        { data: ROW_B },
        out({ shared_memory_region: "small", shared_memory_byte_size: 64, binary_data: true }),
      ),
      400,
      "Output can't set both 'shared_memory_region' and 'binary_data' (output 'OUTPUT0')",
    );
    await refused(
      inferHttp(
        { data: ROW_B },
        out({ shared_memory_region: "small", shared_memory_byte_size: 64, classification: 2 }),
      ),
      400,
      "Output can't set both 'shared_memory_region' and 'classification' (output 'OUTPUT0')",
    );
    await refused(
      inferHttp({ data: ROW_B }, out({ shared_memory_region: "small", shared_memory_byte_size: 32 })),
      500,
      "shared memory size specified with the request for output 'OUTPUT0' (32 bytes) should be at least 64 bytes to hold the results",
    );

    // gRPC: Triton's parameter checks, and raw contents only for the inputs not in shared memory.
    const grpcInfer = (request: Partial<ModelInferRequestMessage>) =>
      client.unary<ModelInferResponseMessage>("ModelInfer", {
        model_name: "simple",
        inputs: [
          { name: "INPUT0", datatype: "INT32", shape: [1, 16] },
          { name: "INPUT1", datatype: "INT32", shape: [1, 16], parameters: shmParameters("small", 64) },
        ],
        raw_input_contents: [int32Bytes(ROW_A)],
        ...request,
      });
    shared.write(0, int32Bytes(ROW_B));
    const served = await grpcInfer({});
    assert.deepEqual(
      int32s(Buffer.from(served.raw_output_contents![0]!)),
      ROW_A.map((a, i) => a + ROW_B[i]!),
    );
    const grpcRefused = async (request: Partial<ModelInferRequestMessage>, code: status, details: string) => {
      const error = await callError(grpcInfer(request));
      assert.deepEqual([error.code, error.details], [code, details]);
    };
    await grpcRefused(
      {
        inputs: [
          { name: "INPUT0", datatype: "INT32", shape: [1, 16] },
          {
            name: "INPUT1",
            datatype: "INT32",
            shape: [1, 16],
            parameters: { shared_memory_region: { string_param: "small" } },
          },
        ],
      },
      status.INVALID_ARGUMENT,
      "'shared_memory_byte_size' must be specified along with 'shared_memory_region' parameter for tensor 'INPUT1'",
    );
    await grpcRefused(
      {
        inputs: [
          { name: "INPUT0", datatype: "INT32", shape: [1, 16] },
          {
            name: "INPUT1",
            datatype: "INT32",
            shape: [1, 16],
            parameters: { shared_memory_offset: { int64_param: 4 } },
          },
        ],
        raw_input_contents: [int32Bytes(ROW_A), int32Bytes(ROW_B)],
      },
      status.INVALID_ARGUMENT,
      "'shared_memory_offset' can not be specified without 'shared_memory_region' parameter for tensor 'INPUT1'",
    );
    await grpcRefused(
      {
        inputs: [
          { name: "INPUT0", datatype: "INT32", shape: [1, 16] },
          { name: "INPUT1", datatype: "INT32", shape: [1, 16], parameters: shmParameters("small", 64) },
        ],
        raw_input_contents: [int32Bytes(ROW_A), int32Bytes(ROW_B)],
      },
      status.INVALID_ARGUMENT,
      "expected 1 raw_input_contents for the 1 inputs of the request to model 'simple' not in shared memory, got 2",
    );
    await grpcRefused(
      {
        outputs: [
          {
            name: "OUTPUT0",
            parameters: { ...shmParameters("small", 64), classification: { int64_param: 1 } },
          },
        ],
      },
      status.INVALID_ARGUMENT,
      "output can't set both 'shared_memory_region' and 'classification' (output 'OUTPUT0')",
    );
    await grpcRefused(
      { outputs: [{ name: "OUTPUT1", parameters: shmParameters("gone", 64) }] },
      status.NOT_FOUND,
      "Unable to find shared memory region: 'gone'",
    );

    // A request of a few bytes naming a gigabyte: refused by its shape before anything is
    // read (the object is empty by then, so a read would fail otherwise).
    const huge = object(2 ** 30);
    await client.unary("SystemSharedMemoryRegister", { name: "huge", key: huge.key, byte_size: 2 ** 30 });
    huge.truncate(0);
    await grpcRefused(
      {
        inputs: [
          { name: "INPUT0", datatype: "INT32", shape: [1, 16] },
          {
            name: "INPUT1",
            datatype: "INT32",
            shape: [2 ** 24, 16],
            parameters: shmParameters("huge", 2 ** 30),
          },
        ],
      },
      status.INVALID_ARGUMENT,
      "[request id: <id_unknown>] inference request batch-size must be <= 8 for 'simple'",
    );
    await grpcRefused(
      {
        inputs: [
          { name: "INPUT0", datatype: "INT32", shape: [1, 16] },
          {
            name: "INPUT1",
            datatype: "INT32",
            shape: [1, 2 ** 24],
            parameters: shmParameters("huge", 2 ** 26),
          },
        ],
      },
      status.INVALID_ARGUMENT,
      "[request id: <id_unknown>] unexpected shape for input 'INPUT1' for model 'simple'. Expected [-1,16], got [1,16777216]. NOTE: Setting a non-zero max_batch_size in the model config requires a batch dimension to be prepended to each input shape. If you want to specify the full shape including the batch dim in your input dims config, try setting max_batch_size to zero. See the model configuration docs for more info on max_batch_size.",
    );
    await client.unary("SystemSharedMemoryUnregister", { name: "huge" });

    // A client that shrinks its object after registering gets an error, not a crash.
    shared.truncate(32);
    await refused(
      inferHttp(shm({ shared_memory_region: "small", shared_memory_byte_size: 64 })),
      400,
      `shared memory region 'small' ends before the 64 bytes at offset 0: its key '${shared.key}' was truncated after it was registered`,
    );
    const after = await postJson(`${server.url}/v2/models/simple/infer`, {
      inputs: [
        { name: "INPUT0", datatype: "INT32", shape: [1, 16], data: ROW_A },
        { name: "INPUT1", datatype: "INT32", shape: [1, 16], data: ROW_B },
      ],
    });
    assert.equal(after.status, 200);
    await client.unary("SystemSharedMemoryUnregister", { name: "small" });
  });

  it("a region outlives its key's name: unlinked after registering, it is still read and written", async () => {
    const shared = new SharedObject(128);
    shared.write(0, int32Bytes(ROW_A));
    await register("unlinked", { key: shared.key, byte_size: 128 });
    const path = `${SHM_DIRECTORY}${shared.key}`;
    rmSync(path);
    const response = await client.unary<ModelInferResponseMessage>("ModelInfer", {
      model_name: "simple",
      inputs: [
        { name: "INPUT0", datatype: "INT32", shape: [1, 16], parameters: shmParameters("unlinked", 64) },
        { name: "INPUT1", datatype: "INT32", shape: [1, 16], contents: { int_contents: ROW_B } },
      ],
      outputs: [{ name: "OUTPUT0", parameters: shmParameters("unlinked", 64, 64) }],
    });
    // As Triton: the output is listed, with an empty raw entry.
    assert.deepEqual(
      response.outputs?.map((o) => o.name),
      ["OUTPUT0"],
    );
    assert.equal(response.raw_output_contents?.[0]?.length, 0);
    assert.deepEqual(
      int32s(shared.read(64, 64)),
      ROW_A.map((a, i) => a + ROW_B[i]!),
    );
    shared.unlink();
    await client.unary("SystemSharedMemoryUnregister", { name: "unlinked" });
  });

  it("Silero VAD sequences whose audio and answers travel through shared memory answer as the oracle", async () => {
    const sequences = 8;
    const chunks = 12;
    const audio = Array.from({ length: sequences }, (_, s) => sequenceAudio(300 + s, chunks));
    const expected = await expectedBits(audio);
    const chunkBytes = SILERO_SAMPLES * 4;
    // One object per sequence: its chunks one after another, then a 4-byte slot per answer.
    const regions = audio.map((chunksOf, s) => {
      const shared = object(chunks * chunkBytes + chunks * 4);
      for (const [c, chunk] of chunksOf.entries()) shared.write(c * chunkBytes, chunk);
      return { shared, input: `vad_in_${s}`, output: `vad_out_${s}` };
    });
    for (const { shared, input, output } of regions) {
      await client.unary("SystemSharedMemoryRegister", {
        name: input,
        key: shared.key,
        offset: 0,
        byte_size: chunks * chunkBytes,
      });
      await register(output, { key: shared.key, offset: chunks * chunkBytes, byte_size: chunks * 4 });
    }
    // Half the sequences on one gRPC stream, half over HTTP JSON, all at once: the
    // server batches chunks of both kinds together.
    const stream = new StreamCall(client, "vad");
    const runGrpc = async (s: number): Promise<void> => {
      const { input, output } = regions[s]!;
      for (let c = 0; c < chunks; c++) {
        const answer = await stream.send({
          model_name: SILERO_STATEFUL_MODEL,
          parameters: sequenceParameters({ id: 7000 + s, start: c === 0, end: c === chunks - 1 }),
          inputs: [
            {
              name: "input",
              datatype: "FP32",
              shape: [1, SILERO_SAMPLES],
              parameters: shmParameters(input, chunkBytes, c * chunkBytes),
            },
            { name: "sr", datatype: "INT64", shape: [] },
          ],
          raw_input_contents: [SILERO_SR_BYTES],
          outputs: [{ name: "output", parameters: shmParameters(output, 4, c * 4) }],
        });
        assert.equal(rawOutput(answer, "output").length, 0);
      }
    };
    const runHttp = async (s: number): Promise<void> => {
      const { input, output } = regions[s]!;
      for (let c = 0; c < chunks; c++) {
        const answer = await postJson(`${server.url}/v2/models/${SILERO_STATEFUL_MODEL}/infer`, {
          parameters: { sequence_id: 7000 + s, sequence_start: c === 0, sequence_end: c === chunks - 1 },
          inputs: [
            {
              name: "input",
              datatype: "FP32",
              shape: [1, SILERO_SAMPLES],
              parameters: {
                shared_memory_region: input,
                shared_memory_offset: c * chunkBytes,
                shared_memory_byte_size: chunkBytes,
              },
            },
            { name: "sr", datatype: "INT64", shape: [], data: [16000] },
          ],
          outputs: [
            {
              name: "output",
              parameters: {
                shared_memory_region: output,
                shared_memory_offset: c * 4,
                shared_memory_byte_size: 4,
              },
            },
          ],
        });
        assert.equal(answer.status, 200, JSON.stringify(answer.body));
      }
    };
    await Promise.all(audio.map((_, s) => (s % 2 === 0 ? runGrpc(s) : runHttp(s))));
    await stream.end();
    for (let s = 0; s < sequences; s++) {
      const { shared } = regions[s]!;
      const answers = shared.read(chunks * chunkBytes, chunks * 4);
      const served = new Uint32Array(answers.buffer, answers.byteOffset, chunks);
      assert.equal(firstMismatch(s, served, expected[s]!), undefined);
    }
    await client.unary("SystemSharedMemoryUnregister", {});
  });
});

describe("system shared memory without --allow-client-shm=true", {
  skip: !existsSync(SHM_DIRECTORY) && `${SHM_DIRECTORY} is missing`,
}, () => {
  let server: TestServer;
  let client: TestClient;
  before(async () => {
    server = await startTestServer(MODELS, { exitTimeoutSecs: 1 });
    client = new TestClient(server.grpcPort);
  });
  after(async () => {
    client.close();
    await server.stop();
  });

  it("refuses registrations with Triton's message and lists no region", async () => {
    const shared = new SharedObject(64);
    try {
      const message =
        "Client shared memory is disabled. Start the server with '--allow-client-shm=true' to enable.";
      const answer = await postJson(`${server.url}/v2/systemsharedmemory/region/r/register`, {
        key: shared.key,
        byte_size: 64,
      });
      assert.deepEqual([answer.status, answer.body], [501, { error: message }]);
      const error = await callError(
        client.unary("SystemSharedMemoryRegister", { name: "r", key: shared.key, byte_size: 64 }),
      );
      assert.deepEqual([error.code, error.details], [status.UNIMPLEMENTED, message]);
      const unregister = await postJson(`${server.url}/v2/systemsharedmemory/unregister`, {});
      assert.deepEqual([unregister.status, unregister.body], [501, { error: message }]);
      assert.deepEqual((await getJson(`${server.url}/v2/systemsharedmemory/status`)).body, []);
      // A request naming a region finds none.
      const inferred = await postJson(`${server.url}/v2/models/simple/infer`, {
        inputs: [
          { name: "INPUT0", datatype: "INT32", shape: [1, 16], data: ROW_A },
          {
            name: "INPUT1",
            datatype: "INT32",
            shape: [1, 16],
            parameters: { shared_memory_region: "r", shared_memory_byte_size: 64 },
          },
        ],
      });
      assert.deepEqual(
        [inferred.status, inferred.body],
        [404, { error: "Unable to find shared memory region: 'r'" }],
      );
    } finally {
      shared.unlink();
    }
  });
});

describe("system shared memory is bounded by --max-shared-memory-bytes, not by the request size", {
  skip: !existsSync(SHM_DIRECTORY) && `${SHM_DIRECTORY} is missing`,
}, () => {
  let server: TestServer;
  before(async () => {
    server = await startTestServer(
      { floats: { onnx: identityModel("FP32", [-1, -1]) } },
      {
        allowClientSharedMemory: true,
        httpBodyLimitBytes: 1024,
        security: {
          ...DEFAULT_SECURITY_OPTIONS,
          limits: { ...DEFAULT_LIMITS, maxSharedMemoryBytes: 8192 },
        },
      },
    );
  });
  after(() => server.stop());

  it("a tensor larger than an HTTP body may be is read, one past the bound is refused", async () => {
    const shared = new SharedObject(32768);
    try {
      const values = Float32Array.from({ length: 1024 }, (_, i) => i / 7);
      shared.write(0, values);
      const registered = await postJson(`${server.url}/v2/systemsharedmemory/region/big/register`, {
        key: shared.key,
        byte_size: 32768,
      });
      assert.equal(registered.status, 200);
      /** A request for `floats` FP32 values from the region, answered in binary. */
      const request = (floats: number) => ({
        inputs: [
          {
            name: "INPUT0",
            datatype: "FP32",
            shape: [1, floats],
            parameters: { shared_memory_region: "big", shared_memory_byte_size: floats * 4 },
          },
        ],
        outputs: [{ name: "OUTPUT0", parameters: { binary_data: true } }],
      });
      const infer = (floats: number) => postJson(`${server.url}/v2/models/floats/infer`, request(floats));
      // 4 KiB in, four times the body limit: read, and answered (in binary, as asked).
      const read4KiB = () =>
        fetch(`${server.url}/v2/models/floats/infer`, {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: JSON.stringify(request(1024)),
        });
      const read = await read4KiB();
      assert.equal(read.status, 200);
      const body = Buffer.from(await read.arrayBuffer());
      const headerLength = Number(read.headers.get("inference-header-content-length"));
      assert.deepEqual(
        new Float32Array(
          body.buffer.slice(body.byteOffset + headerLength, body.byteOffset + body.byteLength),
        ),
        values,
      );
      // Each read lets its bytes go when answered: three in turn fit under 8192.
      for (let i = 0; i < 3; i++) {
        const again = await read4KiB();
        await again.arrayBuffer();
        assert.equal(again.status, 200, `read ${i + 1}`);
      }
      const refused = await infer(4096);
      assert.deepEqual(
        [refused.status, refused.body],
        [
          429,
          {
            error:
              "reading 16384 bytes from shared memory would take the bytes read by requests in flight past the server's limit of 8192 (--max-shared-memory-bytes)",
          },
        ],
      );
    } finally {
      shared.unlink();
    }
  });
});
