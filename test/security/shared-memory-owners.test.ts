import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { closeSync, existsSync, ftruncateSync, openSync, readSync, rmSync, writeSync } from "node:fs";
import { after, afterEach, before, describe, test } from "node:test";
import { InterceptingCall, type Interceptor, status } from "@grpc/grpc-js";
import { type ApiKey, OPEN_ACCESS, securityOptions } from "../../src/config/security-options.ts";
import type { ModelStreamInferResponseMessage } from "../../src/frontends/grpc/messages.ts";
import { identityModel } from "../../tools/onnx/test-models.ts";
import { callError, TestClient } from "../grpc/support/grpc-harness.ts";
import { rawBytes } from "../support/grpc-stream-call.ts";
import { startTestServer, type TestServer } from "../support/test-server.ts";

// With API keys, a shared memory region belongs to the key that registered it, as a
// sequence belongs to the key that started it. Region names are guessable (tritonclient's
// examples use `input_data` and `output_data`): another key, even one that may not use the
// shared-memory API at all, must neither read a region's input nor overwrite its output
// by naming it in an inference (HTTP JSON and gRPC, unary and streamed), nor see,
// unregister or re-register it. Real objects in /dev/shm, as a client creates them.

const SHM_DIRECTORY = "/dev/shm";
const KEYS: ApiKey[] = [
  { name: "tenant-a", secret: "a-secret-key-0123456789", groups: ["inference", "shared-memory"] },
  { name: "tenant-b", secret: "b-secret-key-0123456789", groups: ["inference", "shared-memory"] },
  // The reviewer's case: no shared-memory API, inference only.
  { name: "tenant-c", secret: "c-secret-key-0123456789", groups: ["inference"] },
];
const [A, B, C] = KEYS.map((k) => k.secret) as [string, string, string];
const bearer = (key: string) => ({ authorization: `Bearer ${key}` });

/** A grpc-js channel option adding `headers` to every call's metadata. */
function withMetadata(headers: Record<string, string>): { interceptors: Interceptor[] } {
  const interceptor: Interceptor = (options, nextCall) =>
    new InterceptingCall(nextCall(options), {
      start(metadata, listener, next) {
        for (const [name, value] of Object.entries(headers)) metadata.set(name, value);
        next(metadata, listener);
      },
    });
  return { interceptors: [interceptor] };
}

/** A client's POSIX shared-memory object, created as shm_open + ftruncate would create it. */
class SharedObject {
  readonly key = `/seqserve-owners-${randomUUID()}`;
  readonly #fd: number;

  constructor(byteSize: number) {
    this.#fd = openSync(`${SHM_DIRECTORY}${this.key}`, "wx+", 0o600);
    ftruncateSync(this.#fd, byteSize);
  }

  write(bytes: Uint8Array): void {
    writeSync(this.#fd, bytes, 0, bytes.byteLength, 0);
  }

  read(byteSize: number): Buffer {
    const bytes = Buffer.alloc(byteSize);
    assert.equal(readSync(this.#fd, bytes, 0, byteSize, 0), byteSize);
    return bytes;
  }

  unlink(): void {
    closeSync(this.#fd);
    rmSync(`${SHM_DIRECTORY}${this.key}`, { force: true });
  }
}

const SECRET = Array.from({ length: 16 }, (_, i) => 1000 + i);
const MINE = Array.from({ length: 16 }, (_, i) => i);
const int32Bytes = (values: readonly number[]): Buffer => rawBytes(Int32Array.from(values));
const DENIED = (region: string) =>
  `shared memory region '${region}' belongs to another caller: only the API key that registered it may use, list or unregister it`;

describe("shared memory regions under API keys", {
  skip: !existsSync(SHM_DIRECTORY) && `${SHM_DIRECTORY} is missing`,
}, () => {
  let server: TestServer;
  let input: SharedObject;
  let output: SharedObject;
  before(async () => {
    server = await startTestServer(
      { ident: { onnx: identityModel("INT32", [-1, 16]) } },
      {
        allowClientSharedMemory: true,
        security: securityOptions({ access: { ...OPEN_ACCESS, apiKeys: KEYS } }),
      },
    );
    input = new SharedObject(64);
    output = new SharedObject(64);
  });
  after(async () => {
    await server.stop();
    input.unlink();
    output.unlink();
  });

  const http = (path: string, key: string, body?: unknown) =>
    fetch(`${server.url}${path}`, {
      method: body === undefined ? "GET" : "POST",
      headers: { "content-type": "application/json", ...bearer(key) },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
  const listed = async (key: string): Promise<string[]> => {
    const answer = await http("/v2/systemsharedmemory/status", key);
    assert.equal(answer.status, 200);
    return ((await answer.json()) as { name: string }[]).map((r) => r.name);
  };
  const shm = (region: string) => ({ shared_memory_region: region, shared_memory_byte_size: 64 });
  /** An HTTP inference reading `input_data` (or `data`) and writing OUTPUT0 to `output_data`. */
  const httpInfer = (key: string, outputs: boolean, inputs: "shm" | "data" = "shm") =>
    http("/v2/models/ident/infer", key, {
      inputs: [
        inputs === "shm"
          ? { name: "INPUT0", datatype: "INT32", shape: [1, 16], parameters: shm("input_data") }
          : { name: "INPUT0", datatype: "INT32", shape: [1, 16], data: MINE },
      ],
      ...(outputs ? { outputs: [{ name: "OUTPUT0", parameters: shm("output_data") }] } : {}),
    });

  // Tenant A's regions, as tritonclient's example names them, its input written.
  const registerA = async () => {
    input.write(int32Bytes(SECRET));
    output.write(new Uint8Array(64));
    for (const [name, object] of [
      ["input_data", input],
      ["output_data", output],
    ] as const) {
      const answer = await http(`/v2/systemsharedmemory/region/${name}/register`, A, {
        key: object.key,
        offset: 0,
        byte_size: 64,
      });
      assert.equal(answer.status, 200, await answer.text());
    }
  };
  afterEach(async () => {
    assert.equal((await http("/v2/systemsharedmemory/unregister", A, {})).status, 200);
    assert.deepEqual(await listed(A), []);
  });

  test("over HTTP, another key can neither read the owner's input nor write its output", async () => {
    await registerA();
    for (const key of [B, C]) {
      const read = await httpInfer(key, false);
      assert.equal(read.status, 403);
      const body = await read.text();
      assert.deepEqual(JSON.parse(body), { error: DENIED("input_data") });
      assert.doesNotMatch(body, /100[0-9]/, "none of the owner's input comes back");
      const written = await httpInfer(key, true, "data");
      assert.equal(written.status, 403);
      assert.deepEqual(await written.json(), { error: DENIED("output_data") });
    }
    // A binary request (its input after the JSON header) goes through the same check.
    const header = Buffer.from(
      JSON.stringify({
        inputs: [{ name: "INPUT0", datatype: "INT32", shape: [1, 16], parameters: { binary_data_size: 64 } }],
        outputs: [{ name: "OUTPUT0", parameters: shm("output_data") }],
      }),
    );
    const binary = await fetch(`${server.url}/v2/models/ident/infer`, {
      method: "POST",
      headers: {
        "content-type": "application/octet-stream",
        "inference-header-content-length": String(header.byteLength),
        ...bearer(B),
      },
      body: Buffer.concat([header, int32Bytes(MINE)]),
    });
    assert.equal(binary.status, 403);
    assert.deepEqual(await binary.json(), { error: DENIED("output_data") });
    assert.deepEqual([...new Int32Array(output.read(64).buffer, 0, 16)], new Array(16).fill(0));
    // The owner's own inference reads and writes its regions.
    const mine = await httpInfer(A, true);
    assert.equal(mine.status, 200, await mine.clone().text());
    assert.deepEqual(
      [...new Int32Array(new Uint8Array(output.read(64)).buffer)],
      SECRET,
      "the owner's output was written where it asked",
    );
  });

  test("over HTTP, another key sees none of the owner's regions and can unregister none", async () => {
    await registerA();
    assert.deepEqual(await listed(A), ["input_data", "output_data"]);
    assert.deepEqual(await listed(B), []);
    const one = await http("/v2/systemsharedmemory/region/input_data/status", B);
    assert.equal(one.status, 403);
    assert.deepEqual(await one.json(), { error: DENIED("input_data") });
    const cuda = await http("/v2/cudasharedmemory/region/input_data/status", B);
    assert.deepEqual(await cuda.json(), { error: "Unable to find cuda shared memory region: 'input_data'" });
    const unregister = await http("/v2/systemsharedmemory/region/input_data/unregister", B, {});
    assert.equal(unregister.status, 403);
    assert.deepEqual(await unregister.json(), { error: DENIED("input_data") });
    // Unregistering "all" is the caller's own: the owner's regions stay.
    assert.equal((await http("/v2/systemsharedmemory/unregister", B, {})).status, 200);
    assert.deepEqual(await listed(A), ["input_data", "output_data"]);
    // Registering the owner's object under a name of its own would read it all the same.
    const again = await http("/v2/systemsharedmemory/region/mine/register", B, {
      key: input.key,
      offset: 0,
      byte_size: 64,
    });
    assert.equal(again.status, 403);
    assert.deepEqual(await again.json(), {
      error: `failed to register shared memory region 'mine': its key '${input.key}' is registered by another caller, only the API key that registered it may register it again`,
    });
    assert.deepEqual(await listed(B), []);
  });

  test("over gRPC, unary and streamed, another key is refused the owner's regions", async () => {
    await registerA();
    const owner = new TestClient(server.grpcPort, withMetadata(bearer(A)));
    const other = new TestClient(server.grpcPort, withMetadata(bearer(B)));
    const inferOnly = new TestClient(server.grpcPort, withMetadata(bearer(C)));
    const grpcShm = (region: string) => ({
      shared_memory_region: { string_param: region },
      shared_memory_byte_size: { int64_param: 64 },
    });
    const readInput = {
      model_name: "ident",
      inputs: [{ name: "INPUT0", datatype: "INT32", shape: [1, 16], parameters: grpcShm("input_data") }],
    };
    const writeOutput = {
      model_name: "ident",
      inputs: [{ name: "INPUT0", datatype: "INT32", shape: [1, 16] }],
      raw_input_contents: [int32Bytes(MINE)],
      outputs: [{ name: "OUTPUT0", parameters: grpcShm("output_data") }],
    };
    try {
      for (const client of [other, inferOnly]) {
        for (const [request, region] of [
          [readInput, "input_data"],
          [writeOutput, "output_data"],
        ] as const) {
          const refused = await callError(client.unary("ModelInfer", request));
          assert.deepEqual([refused.code, refused.details], [status.PERMISSION_DENIED, DENIED(region)]);
        }
        // On a stream, in-band, the stream going on.
        const stream = client.stream();
        const got: ModelStreamInferResponseMessage[] = [];
        stream.on("data", (m: ModelStreamInferResponseMessage) => got.push(m));
        const done = new Promise<void>((resolve) => stream.on("end", resolve));
        stream.write(readInput);
        stream.write(writeOutput);
        stream.end();
        await done;
        assert.deepEqual(
          got.map((m) => m.error_message),
          [DENIED("input_data"), DENIED("output_data")],
        );
      }
      assert.deepEqual([...new Int32Array(new Uint8Array(output.read(64)).buffer)], new Array(16).fill(0));

      const listing = await other.unary<{ regions: Record<string, unknown> }>("SystemSharedMemoryStatus", {});
      assert.deepEqual(listing.regions, {});
      const status1 = await callError(other.unary("SystemSharedMemoryStatus", { name: "output_data" }));
      assert.deepEqual([status1.code, status1.details], [status.PERMISSION_DENIED, DENIED("output_data")]);
      const gone = await callError(other.unary("SystemSharedMemoryUnregister", { name: "output_data" }));
      assert.deepEqual([gone.code, gone.details], [status.PERMISSION_DENIED, DENIED("output_data")]);
      await other.unary("SystemSharedMemoryUnregister", {});

      // The owner, by the same key over gRPC, reaches the regions it registered over HTTP.
      const mine = await owner.unary<{ regions: Record<string, unknown> }>("SystemSharedMemoryStatus", {});
      assert.deepEqual(Object.keys(mine.regions).sort(), ["input_data", "output_data"]);
      await owner.unary("ModelInfer", {
        ...readInput,
        outputs: [{ name: "OUTPUT0", parameters: grpcShm("output_data") }],
      });
      assert.deepEqual([...new Int32Array(new Uint8Array(output.read(64)).buffer)], SECRET);
    } finally {
      owner.close();
      other.close();
      inferOnly.close();
    }
  });
});
