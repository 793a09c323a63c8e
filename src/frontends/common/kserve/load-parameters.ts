import { ServerError } from "../../../core/errors.ts";
import type { ModelLoadOptions } from "../../../core/model.ts";

// Triton's repository load parameters, read alike over HTTP (JSON strings, files in
// base64) and gRPC (typed values): `config`, a model config in Triton's JSON form, and
// `file:<path>`, a file of the model's folder (Triton's file override). Each protocol says
// how a value reads and answers what it does not take, in its own words.

const FILE_PREFIX = "file:";

export interface LoadParameterReader<V> {
  config(value: V, name: string): string;
  file(value: V, name: string): Uint8Array;
  /** The refusal of a parameter that is neither. */
  unknown(name: string): Error;
}

export function readLoadParameters<V>(
  parameters: Iterable<readonly [string, V]>,
  read: LoadParameterReader<V>,
): ModelLoadOptions {
  let config: string | undefined;
  const files = new Map<string, Uint8Array>();
  for (const [name, value] of parameters) {
    if (name === "config") config = read.config(value, name);
    else if (name.startsWith(FILE_PREFIX)) files.set(name.slice(FILE_PREFIX.length), read.file(value, name));
    else throw read.unknown(name);
  }
  return { ...(config === undefined ? {} : { config }), ...(files.size === 0 ? {} : { files }) };
}

/**
 * Triton's refusal of a repository call that names a repository (its path's optional
 * `/v2/repository/<name>/…`, gRPC's `repository_name`): it serves its repositories as one.
 */
export function repositoryNameRefusal(): ServerError {
  return new ServerError("UNSUPPORTED", "'repository_name' specification is not supported");
}
