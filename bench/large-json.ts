// How long one large JSON inference request holds up everything else the server does.
// A seqserve process serves the example models; a probe in a process of its own asks
// `/v2/health/live` every 20 ms while this process sends a Silero VAD request of --rows
// rows as JSON (51 MB at 10,000 rows; its answer holds the state, 2.56 M floats, as JSON
// too). The figure is the probe's slowest answer during the request: the longest the
// server's event loop was held. Pass --baseline <dir> to run an earlier checkout too.
// --api picks the request's family: KServe v2 (`/v2/models/{m}/infer`), TF-Serving REST
// (`/v1/models/{m}:predict`, column form), SageMaker (`/invocations`, a KServe body;
// SageMaker allows 6 MB, so 1,000 rows at most) or a WebSocket stream's text message
// (`/v2/models/{m}/stream`, a KServe body; the answer "status" is 101 there).
//
//   node --import tsx bench/large-json.ts [--api kserve|tfs|sagemaker|ws] [--rows 10000] [--rounds 3] [--baseline dir]
import { spawn } from "node:child_process";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import WebSocket from "ws";
import { type ServerPorts, startServerProcess } from "../src/bench/server-process.ts";

const { values } = parseArgs({
  options: {
    api: { type: "string", default: "kserve" },
    rows: { type: "string", default: "10000" },
    rounds: { type: "string", default: "3" },
    baseline: { type: "string" },
  },
});
const ROOT = fileURLToPath(new URL("..", import.meta.url));
const rows = Number(values.rows);

const api = values.api;
if (api !== "kserve" && api !== "tfs" && api !== "sagemaker" && api !== "ws")
  throw new Error(`--api ${api}: kserve, tfs, sagemaker or ws`);

function requestBody(): string {
  const input = Array.from({ length: rows * 512 }, () => (Math.random() * 0.2 - 0.1).toFixed(6));
  const state = new Array(2 * rows * 128).fill(0);
  if (api === "tfs") {
    const nest = (flat: readonly unknown[], width: number) =>
      Array.from(
        { length: flat.length / width },
        (_, r) => `[${flat.slice(r * width, (r + 1) * width).join(",")}]`,
      );
    const stateRows = nest(state, 128);
    const layers = [stateRows.slice(0, rows), stateRows.slice(rows)].map((layer) => `[${layer.join(",")}]`);
    return `{"inputs":{"input":[${nest(input, 512).join(",")}],"state":[${layers.join(",")}],"sr":16000}}`;
  }
  return `{"inputs":[{"name":"input","datatype":"FP32","shape":[${rows},512],"data":[${input.join(",")}]},{"name":"state","datatype":"FP32","shape":[2,${rows},128],"data":[${state.join(",")}]},{"name":"sr","datatype":"INT64","shape":[],"data":[16000]}]}`;
}

/** Where the request goes, and its headers. */
function endpoint(ports: ServerPorts): {
  url: string;
  headers: Record<string, string>;
} {
  const json = { "content-type": "application/json" };
  if (api === "tfs")
    return { url: `http://127.0.0.1:${ports.http}/v1/models/silero_vad:predict`, headers: json };
  if (api === "sagemaker") {
    return {
      url: `http://127.0.0.1:${ports.sagemaker}/invocations`,
      headers: { ...json, "x-amzn-sagemaker-target-model": "silero_vad" },
    };
  }
  return { url: `http://127.0.0.1:${ports.http}/v2/models/silero_vad/infer`, headers: json };
}

// Asks `url` until its stdin closes, then prints its slowest answer in ms.
const PROBE = `
const url = process.argv[1];
let slowest = 0;
let stop = false;
process.stdin.on("end", () => { stop = true; }).resume();
(async () => {
  while (!stop) {
    const start = performance.now();
    await fetch(url).then((r) => r.text());
    slowest = Math.max(slowest, performance.now() - start);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  console.log(slowest.toFixed(0));
})();
`;

/** The probe's slowest answer, in ms, while `work` runs. */
async function slowestProbe(url: string, work: () => Promise<void>): Promise<number> {
  let output = "";
  const probe = spawn(process.execPath, ["-e", PROBE, url], { stdio: ["pipe", "pipe", "inherit"] });
  probe.stdout.on("data", (chunk: Buffer) => {
    output += chunk.toString();
  });
  const exited = new Promise<void>((resolve) => probe.once("exit", () => resolve()));
  await new Promise((resolve) => setTimeout(resolve, 500));
  await work();
  await new Promise((resolve) => setTimeout(resolve, 500));
  probe.stdin.end();
  await exited;
  return Number(output);
}

/** Sends `body` as one text message on a new stream and waits for its answer; 101 when it comes. */
function streamMessage(url: string, body: string): Promise<number> {
  const socket = new WebSocket(url);
  return new Promise((resolve, reject) => {
    socket.once("open", () => socket.send(body));
    socket.once("message", () => {
      socket.close();
      resolve(101);
    });
    socket.once("error", reject);
  });
}

async function measure(label: string, root: string, body: string): Promise<void> {
  const server = await startServerProcess(
    join(root, "examples/models"),
    [],
    [],
    join(root, "bin/seqserve.js"),
  );
  try {
    const base = `http://127.0.0.1:${server.ports.http}`;
    for (let round = 1; round <= Number(values.rounds); round++) {
      let status = 0;
      let ms = 0;
      const slowest = await slowestProbe(`${base}/v2/health/live`, async () => {
        const start = performance.now();
        if (api === "ws") {
          status = await streamMessage(
            `ws://127.0.0.1:${server.ports.http}/v2/models/silero_vad/stream`,
            body,
          );
        } else {
          const { url, headers } = endpoint(server.ports);
          const response = await fetch(url, { method: "POST", headers, body });
          await response.arrayBuffer();
          status = response.status;
        }
        ms = performance.now() - start;
      });
      console.log(
        `${label} round ${round}: ${status}, request ${ms.toFixed(0)} ms, slowest health answer meanwhile ${slowest} ms`,
      );
    }
  } finally {
    await server.stop();
  }
}

const body = requestBody();
console.log(`${api} request body ${(body.length / 2 ** 20).toFixed(1)} MiB (${rows} rows)`);
if (values.baseline !== undefined) await measure("before", values.baseline, body);
await measure("seqserve", ROOT, body);
