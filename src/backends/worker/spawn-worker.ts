import { type ResourceLimits, Worker } from "node:worker_threads";

// Starts a worker thread whose entry is a TypeScript module. Node 20 cannot load `.ts`
// itself, and tsx's `--import tsx` hooks do not reach a worker's entry on Node 20 (tsx
// registers its loader on the main thread only there), so a `.ts` entry is started
// through a two-line ESM bootstrap that registers tsx in the worker and then imports the
// entry. tsx is resolved from this module, so this works wherever the server was started
// from: `node --import tsx`, the `bin/seqserve.js` entry (tsx's register() API), or tests.

const REGISTRATION_FLAGS = new Set(["--import", "--require", "-r", "--loader", "--experimental-loader"]);

function isTsx(specifier: string | undefined): boolean {
  if (specifier === undefined) return false;
  return (
    specifier === "tsx" || specifier.startsWith("tsx/") || /[\\/]node_modules[\\/]tsx[\\/]/.test(specifier)
  );
}

/** The parent's flags without its tsx registration (the bootstrap registers tsx once). */
export function workerExecArgv(execArgv: readonly string[] = process.execArgv): string[] {
  const kept: string[] = [];
  for (let i = 0; i < execArgv.length; i++) {
    const arg = execArgv[i]!;
    if (REGISTRATION_FLAGS.has(arg) && isTsx(execArgv[i + 1])) {
      i++;
      continue;
    }
    const joined = /^(--[a-z-]+)=(.*)$/.exec(arg);
    if (joined !== null && REGISTRATION_FLAGS.has(joined[1]!) && isTsx(joined[2])) continue;
    kept.push(arg);
  }
  return kept;
}

function bootstrapUrl(entry: URL): URL {
  const api = JSON.stringify(import.meta.resolve("tsx/esm/api"));
  const code = `const { register } = await import(${api});\nregister();\nawait import(${JSON.stringify(entry.href)});\n`;
  return new URL(`data:text/javascript,${encodeURIComponent(code)}`);
}

export interface SpawnOptions {
  readonly workerData?: unknown;
  readonly resourceLimits?: ResourceLimits;
}

export function spawnWorker(entry: URL, options: SpawnOptions = {}): Worker {
  const url = entry.pathname.endsWith(".ts") ? bootstrapUrl(entry) : entry;
  const { workerData, resourceLimits } = options;
  try {
    return new Worker(url, { workerData, resourceLimits, execArgv: workerExecArgv() });
  } catch (error) {
    // Flags that affect the whole process (V8 heap sizes, --title, ...) are refused in a
    // worker's execArgv; such a server still gets workers, without the parent's flags.
    if ((error as NodeJS.ErrnoException).code !== "ERR_WORKER_INVALID_EXEC_ARGV") throw error;
    return new Worker(url, { workerData, resourceLimits, execArgv: [] });
  }
}
