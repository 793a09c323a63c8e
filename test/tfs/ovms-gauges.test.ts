import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { Registry } from "prom-client";
import { ovmsMetricsSettings } from "../../src/config/ovms-metrics-config.ts";
import type { ModelRegistry, ServedModel } from "../../src/core/model.ts";
import { ovmsMetrics } from "../../src/observability/ovms-metrics.ts";
import { int32ModelConfig } from "../core/support/int32-model-config.ts";

// OVMS's gauges read from the served models at scrape time: requests in process
// (accepted, not yet answered) and, of those, the ones handed to an instance.

describe("OVMS's request gauges", () => {
  it("ovms_current_requests counts the requests accepted, ovms_infer_req_active those with an instance", async () => {
    const registry = new Registry();
    const metrics = ovmsMetrics(
      registry,
      ovmsMetricsSettings(["ovms_current_requests", "ovms_infer_req_active", "ovms_streams"]),
    );
    const model = {
      name: "busy",
      version: "2",
      config: {
        ...int32ModelConfig("busy", 4),
        instanceGroups: [{ name: "busy", count: 3, kind: "KIND_CPU" }],
      },
      pending: 5,
      running: 2,
    } as unknown as ServedModel;
    metrics.watchModels({ served: () => [model] } as unknown as ModelRegistry);
    const text = await registry.metrics();
    const value = (family: string) =>
      Number(new RegExp(`^${family}\\{name="busy",version="2"\\} (\\S+)$`, "m").exec(text)?.[1]);
    assert.equal(value("ovms_current_requests"), 5);
    assert.equal(value("ovms_infer_req_active"), 2);
    assert.equal(value("ovms_streams"), 3);
  });
});

describe("OVMS's time histograms of a model version", () => {
  it("exist at zero from its load, are shared by a reload's versions, and go with the last", async () => {
    const registry = new Registry();
    const metrics = ovmsMetrics(registry, ovmsMetricsSettings(undefined));
    const series = async () =>
      (await registry.metrics())
        .split("\n")
        .filter((line) => /^ovms_(inference_time|wait_for_infer_req_time|request_time)_us_count\{/.test(line))
        .filter((line) => line.includes('name="m"') && line.includes('version="1"')).length;
    const old = metrics.observeRequests("m", "1");
    assert.equal(await series(), 4, "inference, wait, and request time on each of 2 transports");
    const reloaded = metrics.observeRequests("m", "1");
    old?.close?.();
    assert.equal(await series(), 4, "the reloaded version still has them");
    reloaded?.close?.();
    assert.equal(await series(), 0, "unloaded: gone");
  });
});
