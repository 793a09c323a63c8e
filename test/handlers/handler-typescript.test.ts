import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { postJson } from "../support/http-client.ts";
import { startTestServer, type TestServer } from "../support/test-server.ts";
import { type HandlerRepository, handlerRepository } from "./support/handler-kit.ts";

// TypeScript handlers are compiled on the main thread and their workers import the result,
// with no TypeScript loader (compile-handler.ts). What a handler's code can rely on must
// survive that: its relative imports, package imports resolved from its own folder (an
// ES-module-only package and a CommonJS one), each file's own import.meta.url and
// import.meta.dirname, CommonJS syntax with require() and __dirname, and stack traces
// that name its own lines. A handler that does not compile fails its load with the
// compiler's message, file and line, and the other models are served.

const TEXT_IO = `export const metadata = {
  inputs: [{ name: "TEXT", datatype: "BYTES", shape: [1] }],
  outputs: [{ name: "OUT", datatype: "BYTES", shape: [1] }],
};`;

const answer = (expression: string) =>
  `requests.map((r: any) => ({ outputs: { OUT: { datatype: "BYTES", shape: [1], data: [${expression}] } } }))`;

const PACKAGES = {
  // An ES-module-only package: Node resolves it for import only.
  "../../node_modules/esm-only/package.json": JSON.stringify({
    name: "esm-only",
    type: "module",
    exports: { import: "./index.js" },
  }),
  "../../node_modules/esm-only/index.js": "export const shout = (s) => s.toUpperCase();\n",
  "../../node_modules/cjs-pkg/package.json": JSON.stringify({ name: "cjs-pkg", main: "main.js" }),
  "../../node_modules/cjs-pkg/main.js": "exports.exclaim = (s) => s + '!';\n",
};

const ES_MODULE = `
import { readFileSync } from "node:fs";
import { shout } from "esm-only";
import cjs from "cjs-pkg";
import { helperFile, greeting } from "./helper.ts";

${TEXT_IO}

const byUrl = readFileSync(new URL("./data.txt", import.meta.url), "utf8").trim();
const byDirname = readFileSync(import.meta.dirname + "/data.txt", "utf8").trim();
const own = new URL(import.meta.url).pathname.split("/").pop();

export function execute(requests: any[]) {
  return ${answer("[greeting, shout(byUrl), cjs.exclaim(byDirname), own, helperFile, new TextDecoder().decode(r.inputs.TEXT.data[0])].join(' ')")};
}
`;

const HELPER = `
export const greeting: string = "hello";
export const helperFile = new URL(import.meta.url).pathname.split("/").pop();
`;

const COMMON_JS = `
const { exclaim } = require("cjs-pkg");
const { basename } = require("node:path");
module.exports = {
  metadata: { inputs: [{ name: "TEXT", datatype: "BYTES", shape: [1] }], outputs: [{ name: "OUT", datatype: "BYTES", shape: [1] }] },
  execute(requests: any[]) {
    return ${answer("exclaim(basename(__dirname)) + ' ' + basename(__filename)")};
  },
};
`;

const THROWING = `${TEXT_IO}

function fail(): never {
  throw new Error("thrown on purpose");
}

export function execute(requests: any[]) {
  try {
    fail();
  } catch (error) {
    return ${answer("(error as Error).stack!.split('\\n')[1]!.trim()")};
  }
}
`;

const BROKEN = `${TEXT_IO}

export function execute(requests: any[]) {
  return requests.map((r) => { outputs: );
}
`;

let repository: HandlerRepository;
let server: TestServer;

before(async () => {
  repository = handlerRepository({
    es_module: {
      files: { "1/model.ts": ES_MODULE, "1/helper.ts": HELPER, "1/data.txt": "beside\n", ...PACKAGES },
    },
    common_js: { files: { "1/model.ts": COMMON_JS } },
    throwing: { files: { "1/model.ts": THROWING } },
    broken: { files: { "1/model.ts": BROKEN } },
    // The nearest tsconfig.json does not parse: the load fails, naming it.
    stray_tsconfig: { files: { "1/model.ts": THROWING, "1/tsconfig.json": "{ not json" } },
  });
  server = await startTestServer(repository.path, { exitOnError: false });
});

after(async () => {
  await server?.stop();
  repository?.remove();
});

const infer = async (model: string): Promise<{ status: number; body: Record<string, unknown> }> =>
  postJson(`${server.url}/v2/models/${model}/infer`, {
    inputs: [{ name: "TEXT", datatype: "BYTES", shape: [1], data: ["in"] }],
  });

/** Why the model failed to load, from the repository index. */
async function loadFailure(model: string): Promise<string> {
  const index = await postJson(`${server.url}/v2/repository/index`, {});
  const entry = (index.body as unknown as { name: string; state: string; reason: string }[]).find(
    (m) => m.name === model,
  );
  assert.equal(entry?.state, "UNAVAILABLE");
  return entry!.reason;
}

const text = (body: Record<string, unknown>): string => (body.outputs as { data: string[] }[])[0]!.data[0]!;

describe("TypeScript handlers, compiled without a loader", () => {
  it("keep relative imports, package imports from their folder and each file's import.meta", async () => {
    const { status, body } = await infer("es_module");
    assert.equal(status, 200, JSON.stringify(body));
    assert.equal(text(body), "hello BESIDE beside! model.ts helper.ts in");
  });

  it("in CommonJS syntax keep require() from their folder, __dirname and __filename", async () => {
    const { status, body } = await infer("common_js");
    assert.equal(status, 200, JSON.stringify(body));
    assert.equal(text(body), "1! model.ts");
  });

  it("give stack traces on the handler's own file and line", async () => {
    const { status, body } = await infer("throwing");
    assert.equal(status, 200, JSON.stringify(body));
    assert.match(text(body), /^at fail \(.*[\\/]throwing[\\/]1[\\/]model\.ts:7:\d+\)$/);
  });

  it("whose nearest tsconfig.json does not parse fail their load, naming it", async () => {
    assert.equal((await infer("stray_tsconfig")).status, 503);
    assert.match(await loadFailure("stray_tsconfig"), /stray_tsconfig[\\/]1[\\/]tsconfig\.json:1:2: /);
  });

  it("that do not compile fail their load with the compiler's message, file and line", async () => {
    const { status } = await infer("broken");
    assert.equal(status, 503, "the model is unavailable");
    const reason = await loadFailure("broken");
    assert.match(
      reason,
      /the handler '.*model\.ts' does not compile: [^ ]*[\\/]broken[\\/]1[\\/]model\.ts:7:\d+: Unexpected/,
    );
  });
});
