import type { ModelRegistry, ServedModel } from "../core/model.ts";
import type { ModelStatisticsSnapshot } from "../core/statistics.ts";

// The models' statistics as the Prometheus counters read them. A version loaded again in
// the place of another (a reload) starts its statistics at zero, as Triton's statistics
// API does, while its counters go on from the totals of the loads it replaced, as
// Triton's metric reporter does (found again by model and version). A version unloaded
// takes its series, and its totals, with it.

export interface VersionTotals {
  readonly labels: { readonly model: string; readonly version: string };
  /** The served load's statistics first, then the final ones of each load it replaced. */
  readonly snapshots: readonly ModelStatisticsSnapshot[];
}

interface Entry {
  model: ServedModel;
  readonly replaced: ModelStatisticsSnapshot[];
}

export class StatisticsTotals {
  readonly #entries = new Map<string, Entry>();

  read(models: ModelRegistry): VersionTotals[] {
    const totals: VersionTotals[] = [];
    const served = new Set<string>();
    for (const model of models.served()) {
      const key = `${model.name}\u0000${model.version}`;
      served.add(key);
      let entry = this.#entries.get(key);
      if (entry === undefined) {
        entry = { model, replaced: [] };
        this.#entries.set(key, entry);
      } else if (entry.model !== model) {
        // Replaced since the last read: the old load has stopped counting (what it still
        // finishes after the switch is not seen).
        entry.replaced.push(entry.model.statistics());
        entry.model = model;
      }
      totals.push({
        labels: { model: model.name, version: model.version },
        snapshots: [model.statistics(), ...entry.replaced],
      });
    }
    for (const key of [...this.#entries.keys()]) if (!served.has(key)) this.#entries.delete(key);
    return totals;
  }
}
