import { readFile } from "node:fs/promises";
import { builtinModules } from "node:module";
import { dirname, extname, join, resolve, sep } from "node:path";
import { pathToFileURL } from "node:url";
import type { BuildOptions, Loader, Message, Plugin, TsconfigRaw } from "esbuild";
import { type Cache, getTsconfig } from "get-tsconfig";
import { invalidArg } from "../../core/errors.ts";

// A TypeScript handler is compiled here, on the main thread, once per model load, into one
// ES module that its workers import with no TypeScript loader. A loader in each worker (tsx
// on Node 20 runs its module hooks on a thread of their own, with esbuild beside it) cost
// about 27 MB per handler model, idle, for the handler's whole life.
//
// The module keeps the handler's meaning where it runs from elsewhere:
// - the handler's own files (model.ts and what it imports by relative path or by a
//   tsconfig `paths` alias) are bundled, each compiled with the tsconfig.json nearest to
//   it, its `extends` followed;
// - package imports (files under node_modules) stay imports, resolved here as Node resolves
//   them from the handler's folder, and written as absolute URLs (paths for require());
// - each file's `import.meta.url`, `import.meta.dirname`, `import.meta.filename`,
//   `__dirname` and `__filename` are its own, not the compiled module's;
// - a CommonJS file's require() resolves from the handler's folder;
// - an inline source map points stack traces at the handler's own lines.
// What differs: import() of a computed path or package name, and import.meta.resolve(),
// resolve from the compiled module's location. esbuild's service (a child process) runs
// only while some handler is being compiled.

const SOURCE = /\.(?:[cm]?[jt]s|[jt]sx)$/;
const LOADERS: Record<string, Loader> = {
  ".ts": "ts",
  ".mts": "ts",
  ".cts": "ts",
  ".tsx": "tsx",
  ".jsx": "jsx",
};
const BUILTINS = new Set(builtinModules);

/** Whether `file` is TypeScript: compiled before its workers load it. */
export function isTypeScriptHandler(file: string): boolean {
  return /\.(?:[cm]?ts|tsx)$/.test(file);
}

const isBare = (specifier: string): boolean =>
  !specifier.startsWith(".") && !specifier.startsWith("/") && !/^[a-z][a-z0-9+.-]*:/i.test(specifier);

/** What one compile has read of tsconfig files. */
interface TsconfigCache {
  /** get-tsconfig's own record of the files and folders it looked at. */
  readonly lookups: Cache;
  /** Per tsconfig file: its compiler options, checked once however many folders it covers. */
  readonly options: Map<string, Promise<TsconfigRaw>>;
}

/**
 * The compiler options of the tsconfig.json nearest to `dir`, its `extends` merged in, or
 * undefined. get-tsconfig reads leniently: esbuild parses the file itself too, so that one
 * which does not parse fails the load, naming the file and place.
 */
function nearestTsconfig(
  esbuild: typeof import("esbuild"),
  dir: string,
  cache: TsconfigCache,
): Promise<TsconfigRaw | undefined> {
  const nearest = getTsconfig(dir, "tsconfig.json", cache.lookups);
  if (nearest === null) return Promise.resolve(undefined);
  let options = cache.options.get(nearest.path);
  if (options === undefined) {
    options = (async () => {
      const text = await readFile(nearest.path, "utf8");
      try {
        await esbuild.transform("", { loader: "ts", tsconfigRaw: text, logLevel: "silent" });
      } catch (error) {
        const errors = (error as BuildFailure).errors;
        if (errors === undefined) throw error;
        const named = errors.map((e) => ({
          ...e,
          location: e.location && { ...e.location, file: nearest.path },
        }));
        throw new CompileErrors(named);
      }
      return { compilerOptions: nearest.config.compilerOptions ?? {} } as TsconfigRaw;
    })();
    cache.options.set(nearest.path, options);
  }
  return options;
}

/** Errors with their places, passed through the build to the load's message. */
class CompileErrors extends Error {
  constructor(readonly errors: readonly Message[]) {
    super(errors[0]?.text ?? "does not compile");
  }
}

/** Whether a resolved file belongs to an installed package rather than to the handler. */
const inPackage = (path: string): boolean => path.split(sep).includes("node_modules");

function handlerFiles(esbuild: typeof import("esbuild")): Plugin {
  const tsconfigs: TsconfigCache = { lookups: new Map(), options: new Map() };
  return {
    name: "seqserve-handler",
    setup(build) {
      build.onResolve({ filter: /.*/ }, async (args) => {
        if (args.kind === "entry-point" || args.pluginData === "inner" || !isBare(args.path))
          return undefined;
        if (args.path.startsWith("node:") || BUILTINS.has(args.path)) return { external: true };
        const found = await build.resolve(args.path, {
          kind: args.kind,
          importer: args.importer,
          resolveDir: args.resolveDir,
          pluginData: "inner",
        });
        if (found.errors.length > 0) return { errors: found.errors };
        // A tsconfig `paths` alias (or a workspace link) naming the handler's own files:
        // bundled like a relative import, compiled, not left for Node to load as .ts.
        if (!inPackage(found.path)) return { path: found.path };
        const byRequire = args.kind === "require-call" || args.kind === "require-resolve";
        return { path: byRequire ? found.path : pathToFileURL(found.path).href, external: true };
      });
      build.onLoad({ filter: SOURCE }, async (args) => {
        const url = pathToFileURL(args.path).href;
        const dir = dirname(args.path);
        const file = JSON.stringify(args.path);
        const folder = JSON.stringify(dir);
        let tsconfigRaw: TsconfigRaw | undefined;
        try {
          tsconfigRaw = await nearestTsconfig(esbuild, dir, tsconfigs);
        } catch (error) {
          if (error instanceof CompileErrors) return { errors: [...error.errors] };
          throw error;
        }
        const source = await readFile(args.path, "utf8");
        const options = {
          loader: LOADERS[extname(args.path)] ?? "js",
          sourcefile: args.path,
          sourcemap: "inline",
          // The build itself reads the tsconfig files too, for the imports they map.
          ...(tsconfigRaw === undefined ? {} : { tsconfigRaw }),
          define: {
            "import.meta.url": JSON.stringify(url),
            "import.meta.filename": file,
            "import.meta.dirname": folder,
            __filename: file,
            __dirname: folder,
          },
          logLevel: "silent",
        } as const;
        try {
          const compiled = await esbuild.transform(source, options);
          return { contents: compiled.code, loader: "js", resolveDir: dir, warnings: compiled.warnings };
        } catch (error) {
          // The compiler's own errors, with their places, become the build's.
          const { errors } = error as BuildFailure;
          if (errors === undefined) throw error;
          return { errors: [...errors] };
        }
      });
    },
  };
}

/** What esbuild throws: its messages, with their places. */
interface BuildFailure {
  readonly errors?: readonly Message[];
}

/** "file:line:column: " of a compiler message, its file named from the handler's folder; or "". */
function placeOf(handlerFile: string, message: Message): string {
  const place = message.location;
  return place ? `${resolve(dirname(handlerFile), place.file)}:${place.line}:${place.column}: ` : "";
}

let compiling = 0;

export interface CompiledHandler {
  /** The text of one ES module. */
  readonly code: string;
  /** What the compiler warned of, for the log. */
  readonly warnings: readonly string[];
}

/**
 * Compiles the TypeScript handler at `handlerPath` into the text of one ES module. A file that does
 * not compile is refused with esbuild's message, naming the file, line and column.
 */
export async function compileHandler(modelName: string, handlerPath: string): Promise<CompiledHandler> {
  const file = resolve(handlerPath);
  const esbuild = await import("esbuild");
  compiling++;
  try {
    const build = async (banner?: string): Promise<string> => {
      const options: BuildOptions = {
        entryPoints: [file],
        absWorkingDir: dirname(file),
        bundle: true,
        write: false,
        format: "esm",
        platform: "node",
        target: `node${process.versions.node}`,
        sourcemap: "inline",
        sourcesContent: false,
        // The map's sources are named from the handler's folder, wherever the module runs.
        outfile: join(dirname(file), "handler.mjs"),
        // Packages resolve as Node resolves them: by their "import"/"require" exports and
        // "main", not by the bundlers' "module".
        conditions: [],
        mainFields: ["main"],
        sourceRoot: `${pathToFileURL(dirname(file)).href}/`,
        ...(banner === undefined ? {} : { banner: { js: banner } }),
        logLevel: "silent",
        plugins: [handlerFiles(esbuild)],
      };
      const built = await esbuild.build(options);
      for (const warning of built.warnings) warnings.add(`${placeOf(file, warning)}${warning.text}`);
      return built.outputFiles![0]!.text;
    };
    const warnings = new Set<string>();
    const code = await build();
    // A CommonJS file's require() calls go through esbuild's __require, which needs a
    // require to call: one that resolves from the handler's folder. (Only then: an ES
    // module may declare its own top-level require.)
    if (!code.includes("__require")) return { code, warnings: [...warnings] };
    const from = JSON.stringify(pathToFileURL(file).href);
    const withRequire = await build(
      `import { createRequire as __seqserveCreateRequire } from "node:module";\nconst require = __seqserveCreateRequire(${from});`,
    );
    return { code: withRequire, warnings: [...warnings] };
  } catch (error) {
    const first = (error as BuildFailure).errors?.[0];
    if (first === undefined) throw error;
    throw invalidArg(
      `model '${modelName}': the handler '${handlerPath}' does not compile: ${placeOf(file, first)}${first.text}`,
    );
  } finally {
    // esbuild's service is a child process: it stops once no handler is compiling.
    if (--compiling === 0) await esbuild.stop();
  }
}
