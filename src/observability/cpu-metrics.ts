import { cpus, freemem, totalmem } from "node:os";
import { Gauge, type Registry } from "prom-client";

// Triton's CPU metrics, sampled every --metrics-interval-ms: the share of CPU time all
// cores spent busy since the last sample, and the machine's memory. os.cpus() and
// os.freemem() read /proc/stat and /proc/meminfo (MemAvailable) on Linux, as Triton does,
// and work elsewhere too.

export interface CpuMetrics {
  /** Stops sampling. */
  close(): void;
}

function cpuTimes(): { busy: number; total: number } {
  let busy = 0;
  let total = 0;
  for (const { times } of cpus()) {
    const all = times.user + times.nice + times.sys + times.idle + times.irq;
    total += all;
    busy += all - times.idle;
  }
  return { busy, total };
}

export function cpuMetrics(registry: Registry, intervalMs: number): CpuMetrics {
  const registers = [registry];
  const utilization = new Gauge({
    name: "nv_cpu_utilization",
    help: "CPU utilization rate [0.0 - 1.0]",
    registers,
  });
  const memoryTotal = new Gauge({
    name: "nv_cpu_memory_total_bytes",
    help: "CPU total memory (RAM), in bytes",
    registers,
  });
  const memoryUsed = new Gauge({
    name: "nv_cpu_memory_used_bytes",
    help: "CPU used memory (RAM), in bytes",
    registers,
  });
  let last = cpuTimes();
  const sample = (): void => {
    const now = cpuTimes();
    const total = now.total - last.total;
    if (total > 0) utilization.set((now.busy - last.busy) / total);
    last = now;
    const memory = totalmem();
    memoryTotal.set(memory);
    memoryUsed.set(memory - freemem());
  };
  sample();
  const timer = setInterval(sample, intervalMs);
  timer.unref();
  return { close: () => clearInterval(timer) };
}
