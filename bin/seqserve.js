#!/usr/bin/env node
// seqserve's command: the compiled CLI. The package ships `dist/`; a clone builds it with
// `npm run build` (`npm ci` does it too).
import { existsSync } from "node:fs";

const main = new URL("../dist/cli/main.js", import.meta.url);
if (!existsSync(main)) {
  process.stderr.write("seqserve: dist/ is missing: run 'npm run build' in the seqserve folder first\n");
  process.exit(1);
}
// First of all, while few threads have allocated: cap the process's malloc arenas
// (dist/backends/worker/native-heap.js says why).
const { capMallocArenas } = await import("../dist/backends/worker/native-heap.js");
await capMallocArenas();
await import(main.href);
