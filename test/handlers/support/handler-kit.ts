import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import type { ModelStreamInferResponseMessage } from "../../../src/frontends/grpc/messages.ts";
import { TestClient } from "../../grpc/support/grpc-harness.ts";
import { getJson } from "../../support/http-client.ts";

// Model repositories of handlers for the handler tests, and the events the test handlers
// write: each hook a handler runs appends a JSON line to a file the test names in a
// config parameter, so a test sees what the handler saw, when it saw it.

/** A model folder: its config.pbtxt (omit for auto-complete) and files by path inside the folder. */
export interface FolderModel {
  readonly config?: string;
  readonly files: Readonly<Record<string, string | Uint8Array>>;
}

export interface HandlerRepository {
  readonly path: string;
  /** The file the handlers' events go to (pass it as parameter `events_file`). */
  readonly eventsFile: string;
  remove(): void;
}

/** `models` may be a function of the events file, to name it in the configs. */
export function handlerRepository(
  models:
    | Readonly<Record<string, FolderModel>>
    | ((eventsFile: string) => Readonly<Record<string, FolderModel>>),
): HandlerRepository {
  const path = mkdtempSync(join(tmpdir(), "seqserve-handlers-"));
  const repository = join(path, "models");
  const eventsFile = join(path, "events.jsonl");
  const folders = typeof models === "function" ? models(eventsFile) : models;
  for (const [name, model] of Object.entries(folders)) {
    const dir = join(repository, name);
    mkdirSync(dir, { recursive: true });
    if (model.config !== undefined) writeFileSync(join(dir, "config.pbtxt"), model.config);
    for (const [file, content] of Object.entries(model.files)) {
      mkdirSync(dirname(join(dir, file)), { recursive: true });
      writeFileSync(join(dir, file), content);
    }
  }
  return {
    path: repository,
    eventsFile,
    remove: () => rmSync(path, { recursive: true, force: true }),
  };
}

/**
 * The config of a decoupled handler model that takes a COUNT and answers with INDEX
 * tensors, with `more` config text after (sequence batching, parameters).
 */
export function decoupledCountConfig(more = ""): string {
  return `
backend: "typescript"
max_batch_size: 0
input [ { name: "COUNT" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "INDEX" data_type: TYPE_INT32 dims: [ 1 ] } ]
model_transaction_policy { decoupled: true }
${more}`;
}

/** The handler-side code every test handler starts with: `record(event)` appends to the events file. */
export const RECORDER = `
import { appendFileSync } from "node:fs";
let eventsFile = "";
const record = (event: Record<string, unknown>) => {
  if (eventsFile !== "")
    appendFileSync(eventsFile, JSON.stringify(event, (_k, v) => (typeof v === "bigint" ? v.toString() : v)) + "\\n");
};
`;

/**
 * Model code that takes as long as its request says: input MS (INT32), answered with MS
 * after MS milliseconds; each request recorded as it starts ({ hook: "execute", ms }) when
 * the model's parameter `events_file` names a file.
 */
export const SLEEPER = `${RECORDER}
export default {
  initialize(context: any) {
    eventsFile = context.model.parameters.events_file ?? "";
  },
  async execute(requests: any[]) {
    const out = [];
    for (const r of requests) {
      const ms = Number(r.inputs.MS.data[0]);
      record({ hook: "execute", ms });
      await new Promise((resolve) => setTimeout(resolve, ms));
      out.push({ outputs: { MS: { datatype: "INT32", shape: [1], data: Int32Array.of(ms) } } });
    }
    return out;
  },
};
`;

export type HandlerEvent = Record<string, unknown> & { readonly hook: string };

export function readEvents(file: string): HandlerEvent[] {
  if (!existsSync(file)) return [];
  return readFileSync(file, "utf8")
    .split("\n")
    .filter((line) => line !== "")
    .map((line) => JSON.parse(line) as HandlerEvent);
}

/**
 * Waits until `check` passes (polling; bounded, so a missing event fails with the events
 * seen instead of hanging). Not a timing assertion: only "eventually".
 */
export async function eventually<T>(
  what: string,
  check: () => T | undefined | Promise<T | undefined>,
): Promise<T> {
  const deadline = Date.now() + 15_000;
  for (;;) {
    const value = await check();
    if (value !== undefined && value !== false) return value;
    if (Date.now() > deadline) throw new Error(`gave up waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

/** Waits for an event of the events file matching `match`. */
export function eventOf(
  file: string,
  what: string,
  match: (event: HandlerEvent) => boolean,
): Promise<HandlerEvent> {
  return eventually(what, () => readEvents(file).find(match));
}

export interface SequenceListing {
  readonly sequences: Record<string, unknown>[];
  readonly summary: { live: number; backlog: number; state_bytes: number; ended: Record<string, number> };
}

export async function sequencesOf(url: string, model: string): Promise<SequenceListing> {
  const answer = await getJson(`${url}/v2/models/${model}/sequences`);
  return answer.body as unknown as SequenceListing;
}

/**
 * Sends `requests` on one ModelStreamInfer stream to the server's gRPC `port`, ends it,
 * and gives back every message it answered.
 */
export async function streamAll(
  port: number,
  requests: readonly object[],
): Promise<ModelStreamInferResponseMessage[]> {
  const client = new TestClient(port);
  try {
    const stream = client.stream();
    const received: ModelStreamInferResponseMessage[] = [];
    const ended = new Promise<void>((resolve) => stream.on("end", resolve));
    stream.on("data", (message: ModelStreamInferResponseMessage) => received.push(message));
    for (const request of requests) stream.write(request);
    stream.end();
    await ended;
    return received;
  } finally {
    client.close();
  }
}

/**
 * A handler model that keeps every byte it is sent (IN), in order, as its sequence's
 * state, and answers how many it keeps (KEPT) and their sum (SUM): state that grows by
 * what each step sends.
 */
export const LOG_MODEL: FolderModel = {
  config: `
backend: "typescript"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_UINT8 dims: [ -1 ] } ]
output [
  { name: "KEPT" data_type: TYPE_INT32 dims: [ 1 ] },
  { name: "SUM" data_type: TYPE_INT32 dims: [ 1 ] }
]
sequence_batching {
  max_sequence_idle_microseconds: 60000000
  oldest { max_candidate_sequences: 4 }
}
`,
  files: {
    "1/model.ts": `
export default {
  execute(requests: any[]) {
    return requests.map((request: any) => {
      const state = request.sequence.state;
      const before = state.get("log")?.data ?? new Uint8Array(0);
      const added = request.inputs.IN.data;
      const log = new Uint8Array(before.length + added.length);
      log.set(before);
      log.set(added, before.length);
      state.set("log", { datatype: "UINT8", shape: [log.length], data: log });
      const sum = log.reduce((a: number, b: number) => a + b, 0);
      return {
        outputs: {
          KEPT: { datatype: "INT32", shape: [1], data: Int32Array.of(log.length) },
          SUM: { datatype: "INT32", shape: [1], data: Int32Array.of(sum) },
        },
      };
    });
  },
};
`,
  },
};
