import { Gauge, type Registry } from "prom-client";

// Triton's pinned memory pool families, which every Triton serves (Metrics::EnableMetrics
// enables them, GPU or not): a dashboard built on Triton's panels finds them. seqserve
// runs on the CPU and keeps no page-locked memory for device copies: the pool is empty.

export function pinnedMemoryMetrics(registry: Registry): void {
  const registers = [registry];
  new Gauge({
    name: "nv_pinned_memory_pool_total_bytes",
    help: "Pinned memory pool total memory size, in bytes",
    registers,
  }).set(0);
  new Gauge({
    name: "nv_pinned_memory_pool_used_bytes",
    help: "Pinned memory pool used memory size, in bytes",
    registers,
  }).set(0);
}
