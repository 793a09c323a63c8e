import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { securityOptions } from "../../src/config/security-options.ts";
import type { ModelInferResponseMessage } from "../../src/frontends/grpc/messages.ts";
import { identityModel } from "../../tools/onnx/test-models.ts";
import { TestClient } from "../grpc/support/grpc-harness.ts";
import { metricValue } from "../support/sequence-kit.ts";
import { startTestServer, type TestServer } from "../support/test-server.ts";
import { TfsClient } from "../tfs/support/tfs-client.ts";
import { identityConfig } from "./support/identity-config.ts";

// A gzip-compressed gRPC message may inflate only to --grpc-max-decompressed-bytes, however
// large --grpc-max-message-bytes is: a message of a few kilobytes used to inflate to a GiB
// before any check. Uncompressed messages keep the full message limit. The same limit
// bounds what a message's typed values take once decoded (4 or 8 bytes each, where the
// wire may have one), checked before decoding.

const MiB = 1024 * 1024;
const CONFIG = identityConfig("bytes", "TYPE_UINT8");

let server: TestServer;
let gzip: TestClient;
let plain: TestClient;
before(async () => {
  server = await startTestServer(
    { bytes: { config: CONFIG, onnx: identityModel("UINT8", [-1]) } },
    {
      security: securityOptions({
        limits: { ...securityOptions().limits, grpcMaxDecompressedBytes: 4 * MiB },
      }),
    },
  );
  // grpc-js compresses every message of this channel with gzip (algorithm 2).
  gzip = new TestClient(server.grpcPort, { "grpc.default_compression_algorithm": 2 });
  plain = new TestClient(server.grpcPort);
});
after(async () => {
  gzip.close();
  plain.close();
  await server.stop();
});

const request = (bytes: number) => ({
  model_name: "bytes",
  inputs: [{ name: "INPUT0", datatype: "UINT8", shape: [bytes] }],
  raw_input_contents: [Buffer.alloc(bytes)],
});

test("a gzip message that inflates past the limit is refused, RESOURCE_EXHAUSTED, naming the flag", async () => {
  await assert.rejects(gzip.unary("ModelInfer", request(64 * MiB)), (error: Error & { code: number }) => {
    assert.equal(error.code, 8, error.message);
    assert.match(error.message, /inflates to more than 4194304 bytes.*--grpc-max-decompressed-bytes/);
    return true;
  });
  assert.equal(
    await metricValue(server.metricsUrl, "seqserve_limit_refusals_total", {
      limit: "grpc_decompressed_bytes",
    }),
    1,
  );
});

test("a gzip message within the limit, and an uncompressed one beyond it, are served", async () => {
  const small = await gzip.unary<ModelInferResponseMessage>("ModelInfer", request(MiB));
  assert.equal(small.raw_output_contents?.[0]?.length, MiB);
  const large = await plain.unary<ModelInferResponseMessage>("ModelInfer", request(8 * MiB));
  assert.equal(large.raw_output_contents?.[0]?.length, 8 * MiB);
});

/** `count` UINT8 values as typed contents (uint_contents: a varint, one byte on the wire, each). */
const typedRequest = (count: number) => ({
  model_name: "bytes",
  inputs: [
    {
      name: "INPUT0",
      datatype: "UINT8",
      shape: [count],
      contents: { uint_contents: new Array(count).fill(0) },
    },
  ],
});

const refusedOnceDecoded = (error: Error & { code: number }) => {
  assert.equal(error.code, 8, error.message);
  assert.match(
    error.message,
    /would take more than 4194304 bytes once decoded.*raw contents.*--grpc-max-decompressed-bytes/,
  );
  return true;
};

test("typed values that would take more than the limit once decoded are refused before decoding, RESOURCE_EXHAUSTED; within it they are served", {
  timeout: 30_000,
}, async () => {
  const before = await metricValue(server.metricsUrl, "seqserve_limit_refusals_total", {
    limit: "grpc_decompressed_bytes",
  });
  // 1.2 MB on the wire, 4.8 MB as uint32 values.
  await assert.rejects(plain.unary("ModelInfer", typedRequest(1_200_000)), refusedOnceDecoded);
  const served = await plain.unary<ModelInferResponseMessage>("ModelInfer", typedRequest(100_000));
  assert.equal(served.raw_output_contents?.[0]?.length, 100_000);
  assert.equal(
    await metricValue(server.metricsUrl, "seqserve_limit_refusals_total", {
      limit: "grpc_decompressed_bytes",
    }),
    (before ?? 0) + 1,
  );
});

test("on a ModelStreamInfer stream too, and over TF-Serving's Predict (int64_val, 8 bytes each once decoded)", {
  timeout: 30_000,
}, async () => {
  const stream = plain.stream();
  const ended = new Promise<Error>((resolve) => {
    stream.on("data", () => {});
    stream.on("error", resolve);
  });
  stream.write(typedRequest(1_200_000) as never);
  refusedOnceDecoded((await ended) as Error & { code: number });
  const tfs = new TfsClient(server.grpcPort);
  try {
    await assert.rejects(
      tfs.predict({
        model_spec: { name: "bytes" },
        inputs: {
          INPUT0: {
            dtype: "DT_INT64",
            tensor_shape: { dim: [{ size: 600_000 }] },
            int64_val: new Array(600_000).fill("0"),
          },
        },
      }),
      refusedOnceDecoded,
    );
  } finally {
    tfs.close();
  }
});
