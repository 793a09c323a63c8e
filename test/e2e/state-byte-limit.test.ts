import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { stateEntryBytes } from "../../src/core/sequence/state-store.ts";
import { growingStateConfig, growingStateModel } from "../../tools/onnx/sequence-models.ts";
import { infer, outputData } from "../support/http-client.ts";
import { metricValue } from "../support/sequence-kit.ts";
import { startTestServer, type TestServer } from "../support/test-server.ts";

// A state that grows with every step (a decoder's cache) is bounded in bytes per
// sequence: sequence_state_max_bytes, 64 MiB unless the config says. A step that would
// pass it fails with 429 naming the limit, and the sequence goes on from its state as it
// was. What a state holds counts its entries' keys and overhead besides their data.

/** The growing model's one state entry, without data. */
const CACHE = stateEntryBytes("CACHE", { datatype: "FP32", shape: [0], data: new Float32Array(0) });

const GROWING = growingStateConfig(
  "max_sequence_idle_microseconds: 60000000",
  `parameters [ { key: "sequence_state_max_bytes" value: { string_value: "${CACHE + 16}" } } ]`,
);

describe("sequence_state_max_bytes", () => {
  let server: TestServer;
  before(async () => {
    server = await startTestServer({ growing: { config: GROWING, onnx: growingStateModel() } });
  });
  after(() => server.stop());

  const step = (value: number, sequence: { start?: boolean; end?: boolean } = {}) =>
    infer(server.url, "growing", [{ name: "INPUT", datatype: "FP32", shape: [1, 1], data: [value] }], {
      id: 5,
      ...sequence,
    });

  it("refuses the step that would pass it, and the sequence goes on from its state as it was", async () => {
    // The cache starts as one zero column and gains one per step.
    assert.deepEqual(outputData(await step(1, { start: true }), "OUTPUT"), [1]);
    assert.deepEqual(outputData(await step(2), "OUTPUT"), [3]);
    // Four FP32 values: 16 bytes of data, the limit.
    const full = await step(3);
    assert.deepEqual([outputData(full, "OUTPUT"), outputData(full, "LENGTH")], [[6], [4]]);
    const refused = await step(100);
    assert.equal(refused.status, 429);
    assert.deepEqual(refused.body, {
      error: `the state of sequence 5 of model 'growing' would hold ${CACHE + 20} bytes, more than its sequence_state_max_bytes (${CACHE + 16}): the step is not applied, and the state stays as it was`,
    });
    // The step ran, and failed after: a failure in the model, for Triton's metrics.
    const failures = (reason: string) =>
      metricValue(server.metricsUrl, "nv_inference_request_failure", { model: "growing", reason });
    assert.deepEqual([await failures("BACKEND"), await failures("REJECTED")], [1, 0]);
    // The END frees the state: nothing is kept, so nothing is counted.
    const end = await step(5, { end: true });
    assert.deepEqual(outputData(end, "OUTPUT"), [11]);
    assert.deepEqual(outputData(end, "LENGTH"), [5]);
  });
});

describe("sequence_state_max_bytes on a START", () => {
  let server: TestServer;
  before(async () => {
    // The cache starts as one zero column (4 bytes, the limit): any START passes it.
    const config = growingStateConfig(
      "max_sequence_idle_microseconds: 60000000",
      `parameters [ { key: "sequence_state_max_bytes" value: { string_value: "${CACHE + 4}" } } ]`,
    );
    server = await startTestServer(
      { growing: { config, onnx: growingStateModel() } },
      { sagemakerPort: 0, sagemakerModel: "growing" },
    );
  });
  after(() => server.stop());

  const step = (start: boolean) =>
    infer(server.url, "growing", [{ name: "INPUT", datatype: "FP32", shape: [1, 1], data: [1] }], {
      id: 6,
      start,
    });

  it("refuses the START, which leaves no sequence: a step after it is told to start one, not run on an empty state", async () => {
    const refused = await step(true);
    assert.equal(refused.status, 429);
    assert.deepEqual(refused.body, {
      error: `the state of sequence 6 of model 'growing' would hold ${CACHE + 8} bytes, more than its sequence_state_max_bytes (${CACHE + 4}): the sequence is not started`,
    });
    const next = await step(false);
    assert.equal(next.status, 400);
    assert.match(String((next.body as { error: string }).error), /must specify the START flag/);
  });

  // Past the model's own limit a retry fails the same way: not ServiceUnavailable (which
  // the SDKs retry) nor ModelNotReadyException (a model still loading), but a request the
  // model cannot take.
  it("SageMaker: a session whose opening would pass it is refused 400 ValidationError, not to be retried", async () => {
    const response = await fetch(`http://127.0.0.1:${server.server.sagemakerPort!}/invocations`, {
      method: "POST",
      headers: { "content-type": "application/json", "x-amzn-sagemaker-session-id": "NEW_SESSION" },
      body: JSON.stringify({ inputs: [{ name: "INPUT", datatype: "FP32", shape: [1, 1], data: [1] }] }),
    });
    const body = (await response.json()) as { message: string };
    assert.equal(response.status, 400, JSON.stringify(body));
    assert.equal(response.headers.get("x-amzn-errortype"), "ValidationError");
    assert.equal(response.headers.get("retry-after"), null);
    assert.match(
      body.message,
      /more than its sequence_state_max_bytes \(\d+\): the sequence is not started$/,
    );
  });
});
