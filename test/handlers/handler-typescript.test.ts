import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { postJson } from "../support/http-client.ts";
import { BIN, FREE_PORT_FLAGS, ServerProcess } from "../support/seqserve-process.ts";
import { type HandlerRepository, handlerRepository } from "./support/handler-kit.ts";

// TypeScript handlers are compiled on the main thread and their workers import the result,
// with no TypeScript loader (compile-handler.ts). What a handler's code can rely on must
// survive that: its relative imports and tsconfig `paths` aliases, package imports
// resolved from its own folder as Node resolves them (an ES-module-only package, a
// CommonJS one, one with both), each file's own import.meta.url and import.meta.dirname,
// CommonJS syntax with require() and __dirname, the compiler options of a tsconfig's
// `extends`, and stack traces that name its own lines. A plain model.js is imported as it
// is. A handler that does not compile fails its load with the compiler's message, file and
// line, and the other models are served. The server is the built command, as users run
// it: workers there have no TypeScript loader to hide a module that still needs one.

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
  // Both forms, the bundlers' "module" first: Node takes "import" or "require".
  "../../node_modules/dual/package.json": JSON.stringify({
    name: "dual",
    exports: { module: "./esm.mjs", import: "./esm.mjs", require: "./cjs.cjs" },
  }),
  "../../node_modules/dual/esm.mjs": "export const form = 'esm';\n",
  "../../node_modules/dual/cjs.cjs": "exports.form = 'cjs';\n",
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

// A `paths` alias and legacy decorators, both from the config the tsconfig.json extends.
const ALIASED = `
import { greet } from "@lib/greet";
import { form } from "dual";
const dual = require("dual");

${TEXT_IO}

let decorators = "none";
function tag(...args: unknown[]): void {
  decorators = args.length === 3 ? "legacy" : "standard";
}
class Tagged {
  @tag
  method(): void {}
}
new Tagged();

export function execute(requests: any[]) {
  return ${answer("[greet('alias'), decorators, form, dual.form].join(' ')")};
}
`;

const PLAIN_JS = `
const { basename } = require("node:path");
const { suffix } = require("./helper.js");
module.exports = {
  metadata: { inputs: [{ name: "TEXT", datatype: "BYTES", shape: [1] }], outputs: [{ name: "OUT", datatype: "BYTES", shape: [1] }] },
  execute(requests) {
    return requests.map(() => ({ outputs: { OUT: { datatype: "BYTES", shape: [1], data: [basename(__filename) + suffix] } } }));
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
let server: ServerProcess;
let url: string;

before(async () => {
  repository = handlerRepository({
    es_module: {
      files: { "1/model.ts": ES_MODULE, "1/helper.ts": HELPER, "1/data.txt": "beside\n", ...PACKAGES },
    },
    common_js: { files: { "1/model.ts": COMMON_JS } },
    throwing: { files: { "1/model.ts": THROWING } },
    broken: { files: { "1/model.ts": BROKEN } },
    aliased: {
      files: {
        "1/model.ts": ALIASED,
        "1/lib/greet.ts": "export const greet = (who: string): string => 'hi ' + who;\n",
        // The nearest tsconfig.json only extends, with a comment and a trailing comma.
        "1/tsconfig.json": '{ "extends": "../base.json", // shared\n }\n',
        "base.json": JSON.stringify({
          compilerOptions: { experimentalDecorators: true, baseUrl: "1", paths: { "@lib/*": ["lib/*"] } },
        }),
      },
    },
    plain_js: { files: { "1/model.js": PLAIN_JS, "1/helper.js": "exports.suffix = ' as is';\n" } },
    // The nearest tsconfig.json does not parse: the load fails, naming it.
    stray_tsconfig: { files: { "1/model.ts": THROWING, "1/tsconfig.json": "{ not json" } },
  });
  server = new ServerProcess(process.execPath, [
    BIN,
    ...FREE_PORT_FLAGS,
    "--model-repository",
    repository.path,
    "--exit-on-error=false",
  ]);
  url = `http://127.0.0.1:${(await server.listening).http_port}`;
});

after(async () => {
  await server?.stop();
  repository?.remove();
});

const infer = async (model: string): Promise<{ status: number; body: Record<string, unknown> }> =>
  postJson(`${url}/v2/models/${model}/infer`, {
    inputs: [{ name: "TEXT", datatype: "BYTES", shape: [1], data: ["in"] }],
  });

/** Why the model failed to load, from the repository index. */
async function loadFailure(model: string): Promise<string> {
  const index = await postJson(`${url}/v2/repository/index`, {});
  const entry = (index.body as unknown as { name: string; state: string; reason: string }[]).find(
    (m) => m.name === model,
  );
  assert.equal(entry?.state, "UNAVAILABLE");
  return entry!.reason;
}

/** The text a model answers, the answer checked to be a success. */
async function answerText(model: string): Promise<string> {
  const { status, body } = await infer(model);
  assert.equal(status, 200, JSON.stringify(body));
  return (body.outputs as { data: string[] }[])[0]!.data[0]!;
}

describe("TypeScript handlers, compiled without a loader", () => {
  it("keep relative imports, package imports from their folder and each file's import.meta", async () => {
    assert.equal(await answerText("es_module"), "hello BESIDE beside! model.ts helper.ts in");
  });

  it("in CommonJS syntax keep require() from their folder, __dirname and __filename", async () => {
    assert.equal(await answerText("common_js"), "1! model.ts");
  });

  it("follow a tsconfig's extends and paths, and resolve packages as Node does", async () => {
    assert.equal(await answerText("aliased"), "hi alias legacy esm cjs");
  });

  it("in plain JavaScript are imported as they are", async () => {
    assert.equal(await answerText("plain_js"), "model.js as is");
  });

  it("give stack traces on the handler's own file and line", async () => {
    assert.match(await answerText("throwing"), /^at fail \(.*[\\/]throwing[\\/]1[\\/]model\.ts:7:\d+\)$/);
  });

  it("whose nearest tsconfig.json does not parse fail their load, naming it", async () => {
    assert.equal((await infer("stray_tsconfig")).status, 404, "no version serves: Triton's NOT_FOUND");
    assert.match(await loadFailure("stray_tsconfig"), /stray_tsconfig[\\/]1[\\/]tsconfig\.json:1:2: /);
  });

  it("that do not compile fail their load with the compiler's message, file and line", async () => {
    const { status } = await infer("broken");
    assert.equal(status, 404, "no version serves: Triton's NOT_FOUND");
    const reason = await loadFailure("broken");
    assert.match(
      reason,
      /the handler '.*model\.ts' does not compile: [^ ]*[\\/]broken[\\/]1[\\/]model\.ts:7:\d+: Unexpected/,
    );
  });
});
