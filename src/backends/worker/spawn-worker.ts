import { type ResourceLimits, Worker } from "node:worker_threads";

// Starts a worker thread. The package runs compiled JavaScript: a `.js` entry starts as it
// is, with no loader. A `.ts` entry (the sources run by `node --import tsx`, as the tests
// do) starts through typescript-bootstrap.mjs, which registers tsx in the worker first.

/**
 * The module `stem` beside `base` (an `import.meta.url`), with `base`'s extension: the
 * `.ts` source when running from sources, the compiled `.js` file in the package.
 */
export function siblingModule(base: string, stem: string): URL {
  return new URL(`./${stem}${base.endsWith(".ts") ? ".ts" : ".js"}`, base);
}

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

/** Beside the sources only: the package's workers never have a `.ts` entry. */
const TYPESCRIPT_BOOTSTRAP = new URL("./typescript-bootstrap.mjs", import.meta.url);

export interface SpawnOptions {
  readonly workerData?: unknown;
  readonly resourceLimits?: ResourceLimits;
}

export function spawnWorker(entry: URL, options: SpawnOptions = {}): Worker {
  const typeScript = entry.pathname.endsWith(".ts");
  const url = typeScript ? TYPESCRIPT_BOOTSTRAP : entry;
  const { workerData, resourceLimits } = options;
  const base = { workerData, resourceLimits, ...(typeScript ? { argv: [entry.href] } : {}) };
  try {
    return new Worker(url, { ...base, execArgv: workerExecArgv() });
  } catch (error) {
    // Flags that affect the whole process (V8 heap sizes, --title, ...) are refused in a
    // worker's execArgv; such a server still gets workers, without the parent's flags.
    if ((error as NodeJS.ErrnoException).code !== "ERR_WORKER_INVALID_EXEC_ARGV") throw error;
    return new Worker(url, { ...base, execArgv: [] });
  }
}
