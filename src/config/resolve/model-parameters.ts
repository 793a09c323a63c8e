import { setEntry } from "../parsed-config.ts";
import type { MessageNode } from "./config-node.ts";

// The model's `parameters { key value { string_value } }`, with the readers seqserve's
// own parameters need. Errors point at the parameter's value in the file and quote it.

export interface StatePair {
  readonly input: string;
  readonly output: string;
}

const PAIR = /<<<\s*([^,<>]*?)\s*,\s*([^,<>]*?)\s*>>>/g;

export class ModelParameters {
  readonly #root: MessageNode;
  readonly #graphStatePairs: readonly StatePair[];
  readonly values: Readonly<Record<string, string>>;

  /**
   * `graphStatePairs`: the pairs the ONNX graph's description lists, which the stateful
   * backend takes when the config has no `state_pairs` (graph-description-pairs.ts).
   */
  constructor(root: MessageNode, graphStatePairs: readonly StatePair[] = []) {
    this.#root = root;
    this.#graphStatePairs = graphStatePairs;
    const values: Record<string, string> = {};
    const map = root.map("parameters");
    for (const [key, entry] of Object.entries(map)) {
      const value = typeof entry === "object" && !Array.isArray(entry) ? entry.string_value : undefined;
      setEntry(values, key, typeof value === "string" ? value : "");
    }
    this.values = values;
  }

  has(key: string): boolean {
    return Object.hasOwn(this.values, key);
  }

  get(key: string): string | undefined {
    return this.has(key) ? this.values[key] : undefined;
  }

  /** Throws a ConfigError at the parameter's value. */
  fail(key: string, detail: string): never {
    const map = this.#root.value.parameters;
    if (typeof map === "object" && !Array.isArray(map)) throw this.#root.ctx.error(detail, map, key);
    return this.#root.fail("parameters", detail);
  }

  /** true / false / 1 / 0, in any case (Triton's reading of boolean parameters). */
  bool(key: string, fallback: boolean): boolean {
    const raw = this.get(key);
    if (raw === undefined) return fallback;
    const value = raw.trim().toLowerCase();
    if (value === "true" || value === "1") return true;
    if (value === "false" || value === "0") return false;
    return this.fail(key, `parameter '${key}' must be true, false, 1 or 0, got '${raw}'`);
  }

  /** A whole number ≥ `min`. */
  integer(key: string, fallback: number, min = 0): number {
    const raw = this.get(key);
    if (raw === undefined) return fallback;
    const value = raw.trim();
    if (!/^[+-]?\d+$/.test(value) || !Number.isSafeInteger(Number(value)) || Number(value) < min) {
      return this.fail(key, `parameter '${key}' must be an integer >= ${min}, got '${raw}'`);
    }
    return Number(value);
  }

  /** A number in (0, 1]. */
  ratio(key: string): number | undefined {
    const raw = this.get(key);
    if (raw === undefined) return undefined;
    const value = Number(raw.trim());
    if (raw.trim() === "" || !Number.isFinite(value) || value <= 0 || value > 1) {
      return this.fail(key, `parameter '${key}' must be a number in (0, 1], got '${raw}'`);
    }
    return value;
  }

  /**
   * Whether the config names its state pairs: an empty `state_pairs` names none, and the
   * stateful backend then reads them from the graph's description, as without it.
   */
  get namesStatePairs(): boolean {
    return (this.get("state_pairs") ?? "").trim() !== "";
  }

  /** Where statePairs() found the pairs, for messages about them. */
  get statePairsOrigin(): string {
    return this.namesStatePairs ? "parameter 'state_pairs'" : "the ONNX graph's description";
  }

  /** Names separated by commas and/or spaces. */
  names(key: string): string[] {
    const raw = this.get(key);
    if (raw === undefined) return [];
    return raw.split(/[\s,]+/).filter((name) => name !== "");
  }

  /**
   * The ONNX stateful backend's `state_pairs`: "<<<In1, Out1>>> <<<In2, Out2>>>", the pairs
   * separated by spaces and/or commas (its README separates them by spaces, its example
   * models by commas). Without the parameter, or with it empty, the pairs of the graph's
   * description.
   */
  statePairs(): StatePair[] {
    const key = "state_pairs";
    const raw = this.get(key) ?? "";
    if (raw.trim() === "") return [...this.#graphStatePairs];
    const pairs: StatePair[] = [];
    for (const match of raw.matchAll(PAIR)) {
      const input = match[1] ?? "";
      const output = match[2] ?? "";
      if (input === "" || output === "") break;
      pairs.push({ input, output });
    }
    const rest = raw.replace(PAIR, "").replace(/[\s,]+/g, "");
    if (pairs.length === 0 || rest !== "" || pairs.length !== [...raw.matchAll(PAIR)].length) {
      return this.fail(key, `parameter '${key}' must be a list of '<<<input, output>>>' pairs, got '${raw}'`);
    }
    return pairs;
  }
}
