import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { parseModelConfigText, toTritonJson } from "../../src/config/index.ts";
import { accumulatorModel } from "../../tools/onnx/sequence-models.ts";
import { getJson } from "../support/http-client.ts";
import { accumulatorConfig } from "../support/sequence-kit.ts";
import { startTestServer, type TestServer } from "../support/test-server.ts";

// A `float` field of model_config.proto holds a float32 in Triton, printed in its config
// JSON as protobuf prints a float (6 significant digits, or 9 when 6 do not give the same
// float32 back). `double` fields keep every digit. The values below are what Triton's
// /v2/models/<m>/config shows (checked with protobuf's own C++ text parser and printer).

const utilizationOf = (config: Record<string, unknown>): unknown =>
  (config.sequence_batching as { direct: { minimum_slot_utilization: unknown } }).direct
    .minimum_slot_utilization;

const directConfig = (name: string, utilization: string) =>
  accumulatorConfig(name, 4, `direct { minimum_slot_utilization: ${utilization} }`);

describe("float fields", () => {
  let server: TestServer;
  before(async () => {
    server = await startTestServer({
      nine_digits: { config: directConfig("nine_digits", "0.123456789"), onnx: accumulatorModel() },
      below_float: { config: directConfig("below_float", "1e-50"), onnx: accumulatorModel() },
      tenth: { config: directConfig("tenth", "0.1"), onnx: accumulatorModel() },
    });
  });
  after(() => server.stop());

  it("are kept as float32 and shown in the config as Triton shows them", async () => {
    const shown: Record<string, unknown> = {};
    for (const model of ["nine_digits", "below_float", "tenth"]) {
      const answer = await getJson(`${server.url}/v2/models/${model}/config`);
      assert.equal(answer.status, 200);
      shown[model] = utilizationOf(answer.body);
    }
    assert.deepEqual(shown, { nine_digits: 0.123456791, below_float: 0, tenth: 0.1 });
  });

  it("read the same from config.pbtxt and config.json; beyond float32 they become infinite", () => {
    const pbtxt = parseModelConfigText(
      "sequence_batching { direct { minimum_slot_utilization: 1e39 } }\n" +
        "model_metrics { metric_control { histogram_options { buckets: [ 0.123456789, 1e-50, 1e39 ] } } }",
      { file: "config.pbtxt" },
    );
    const json = parseModelConfigText(
      '{"sequence_batching": {"direct": {"minimum_slot_utilization": 1e39}},' +
        ' "model_metrics": {"metric_control": [{"histogram_options": {"buckets": [0.123456789, 1e-50, 1e39]}}]}}',
      { file: "config.json" },
    );
    for (const parsed of [pbtxt, json]) {
      const config = toTritonJson(parsed.message);
      assert.equal(utilizationOf(config), "Infinity", parsed.file);
      // Histogram buckets are doubles: nothing is rounded.
      const metrics = config.model_metrics as {
        metric_control: [{ histogram_options: { buckets: number[] } }];
      };
      assert.deepEqual(metrics.metric_control[0].histogram_options.buckets, [0.123456789, 1e-50, 1e39]);
    }
  });
});
