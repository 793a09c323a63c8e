import { OnnxModelBuilder } from "../../../tools/onnx/onnx-model-builder.ts";
import type { JsonInput } from "../../support/http-client.ts";

// Shared pieces of the serving end-to-end suites: Triton's "simple" model configuration,
// its inputs and expected outputs, raw HTTP requests, and waiting for a behaviour.

export interface SimpleConfigOptions {
  readonly maxBatchSize?: number;
  /** The dynamic_batching block's contents; undefined = no dynamic batching. */
  readonly dynamicBatching?: string;
  readonly instances?: number;
}

/** config.pbtxt of Triton's "simple": INT32 [16] inputs INPUT0/INPUT1, OUTPUT0 = sum, OUTPUT1 = difference. */
export function simpleConfig(name: string, options: SimpleConfigOptions = {}): string {
  const { maxBatchSize = 8, dynamicBatching, instances = 1 } = options;
  return `
name: "${name}"
backend: "onnxruntime"
max_batch_size: ${maxBatchSize}
input [
  { name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] },
  { name: "INPUT1" data_type: TYPE_INT32 dims: [ 16 ] }
]
output [
  { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] },
  { name: "OUTPUT1" data_type: TYPE_INT32 dims: [ 16 ] }
]
${dynamicBatching === undefined ? "" : `dynamic_batching { ${dynamicBatching} }`}
instance_group [ { count: ${instances} kind: KIND_CPU } ]
`;
}

/** `rows` rows of 16 distinct INT32 values derived from `seed`. */
export function rowsOf(seed: number, rows = 1): number[] {
  return Array.from({ length: rows * 16 }, (_, i) => seed * 1000 + i);
}

/** The two inputs of "simple" for `a` and `b` (flat row-major data of `rows` rows). */
export function simpleInputs(a: readonly number[], b: readonly number[]): JsonInput[] {
  const rows = a.length / 16;
  return [
    { name: "INPUT0", datatype: "INT32", shape: [rows, 16], data: a },
    { name: "INPUT1", datatype: "INT32", shape: [rows, 16], data: b },
  ];
}

export const sum = (a: readonly number[], b: readonly number[]): number[] => a.map((v, i) => v + b[i]!);
export const difference = (a: readonly number[], b: readonly number[]): number[] =>
  a.map((v, i) => v - b[i]!);

export interface RawAnswer {
  readonly status: number;
  readonly headers: Headers;
  readonly text: string;
}

/** A POST with exactly these bytes and headers (no Content-Type unless given). */
export async function rawPost(
  url: string,
  body: string | Uint8Array,
  headers: Record<string, string> = {},
): Promise<RawAnswer> {
  const response = await fetch(url, {
    method: "POST",
    headers: { "accept-encoding": "identity", ...headers },
    body,
  });
  return { status: response.status, headers: response.headers, text: await response.text() };
}

/** The `error` of a KServe error body. */
export function errorOf(
  answer: { readonly text: string } | { readonly body: Record<string, unknown> },
): string {
  const body = "text" in answer ? (JSON.parse(answer.text) as Record<string, unknown>) : answer.body;
  if (typeof body.error !== "string") throw new Error(`not an error body: ${JSON.stringify(body)}`);
  return body.error;
}

/**
 * Waits until `check` resolves true (a behaviour wait, not a timing assertion): fails with
 * `what` when the generous deadline passes first.
 */
export async function waitUntil(
  what: string,
  check: () => Promise<boolean>,
  deadlineMs = 30_000,
): Promise<void> {
  const deadline = Date.now() + deadlineMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`gave up waiting: ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

/** Version `v` of a model that adds `v`: OUTPUT0 = INPUT0 + v (INT32 [-1, 1]), so an answer names its version. */
export function plusVersionModel(v: number): Uint8Array {
  return new OnnxModelBuilder({ opset: 17 })
    .input("INPUT0", "INT32", [-1, 1])
    .output("OUTPUT0", "INT32", [-1, 1])
    .initializer("v", "INT32", [1], new Int32Array([v]))
    .node("Add", ["INPUT0", "v"], ["OUTPUT0"])
    .toBytes();
}
