import { pathToFileURL } from "node:url";
import { isDataType } from "../../core/datatype.ts";
import type { ModelIo, ModelTensorInfo } from "../../core/model-io.ts";
import type { Handler, HandlerMetadata } from "../../handler-api.ts";

// Loading a user's handler file in its worker. A TypeScript handler comes compiled to one
// ES module file (compile-handler.ts, compiled-module-file.ts): the worker runs no
// TypeScript loader. Its inline source map keeps stack traces on the handler's own files.
// A `.js` handler is imported as it is. A handler is the module's default export (an
// object, or a class to instantiate), or the module's own named exports (`export function
// execute…`); a CommonJS module's exports come under `default`.

async function importModule(
  modelPath: string,
  compiledPath: string | undefined,
): Promise<Record<string, unknown>> {
  if (compiledPath !== undefined) process.setSourceMapsEnabled(true);
  const url = pathToFileURL(compiledPath ?? modelPath).href;
  return (await import(url)) as Record<string, unknown>;
}

/** The module's exports, whether it was loaded as ESM or as CommonJS (exports under `default`). */
function exportsOf(module: Record<string, unknown>): Record<string, unknown> {
  const inner = module.default;
  if (typeof inner !== "object" || inner === null || asHandler(inner) !== undefined) return module;
  return "default" in inner || "execute" in inner ? (inner as Record<string, unknown>) : module;
}

export interface LoadedHandler {
  readonly handler: Handler;
  readonly io: ModelIo | undefined;
}

function asHandler(candidate: unknown): Handler | undefined {
  if (typeof candidate === "function") {
    const proto = (candidate as { prototype?: { execute?: unknown } }).prototype;
    if (typeof proto?.execute === "function") return new (candidate as new () => Handler)();
    return undefined;
  }
  if (typeof candidate === "object" && candidate !== null) {
    return typeof (candidate as Partial<Handler>).execute === "function" ? (candidate as Handler) : undefined;
  }
  return undefined;
}

function tensorSpecs(kind: string, value: unknown): ModelTensorInfo[] {
  if (!Array.isArray(value)) throw new Error(`the handler's metadata.${kind} must be an array`);
  return value.map((spec: unknown, i: number) => {
    const s = spec as { name?: unknown; datatype?: unknown; shape?: unknown };
    if (typeof s?.name !== "string" || !isDataType(s.datatype) || !Array.isArray(s.shape)) {
      throw new Error(`the handler's metadata.${kind}[${i}] must be { name, datatype, shape }`);
    }
    const shape = s.shape as unknown[];
    if (!shape.every((d) => Number.isSafeInteger(d) && (d as number) >= -1)) {
      throw new Error(`the handler's metadata.${kind}[${i}] ('${s.name}') has an invalid shape`);
    }
    return { name: s.name, datatype: s.datatype, typeName: s.datatype, shape: shape as number[] };
  });
}

/** Loads the handler at `modelPath`, from `compiledPath` when it is TypeScript. */
export async function loadHandler(modelPath: string, compiledPath?: string): Promise<LoadedHandler> {
  const module = exportsOf(await importModule(modelPath, compiledPath));
  const handler = asHandler(module.default) ?? asHandler(module);
  if (handler === undefined) {
    throw new Error(
      `'${modelPath}' exports no handler: export default an object or class with an execute() method, or export function execute`,
    );
  }
  const metadata = (module.metadata ?? (handler as { metadata?: unknown }).metadata) as
    | HandlerMetadata
    | undefined;
  const io =
    metadata === undefined
      ? undefined
      : { inputs: tensorSpecs("inputs", metadata.inputs), outputs: tensorSpecs("outputs", metadata.outputs) };
  return { handler, io };
}
