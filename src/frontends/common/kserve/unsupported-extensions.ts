import { ServerError } from "../../../core/errors.ts";

// Tensor parameters of the KServe v2 extension seqserve does not implement: Triton's
// shared memory. A request that uses one is refused before it runs, over HTTP and gRPC
// alike: served as if the parameter were absent, a shared-memory client would read a
// region nobody wrote.

const SHARED_MEMORY = ["shared_memory_region", "shared_memory_offset", "shared_memory_byte_size"] as const;

/**
 * Throws UNSUPPORTED when input or output `name` sets an unsupported extension's
 * parameter; `has(key)` says whether its parameters set `key`.
 */
export function refuseUnsupportedExtensions(
  kind: "input" | "output",
  name: string,
  has: (key: string) => boolean,
): void {
  const shared = SHARED_MEMORY.find(has);
  if (shared !== undefined) {
    throw new ServerError(
      "UNSUPPORTED",
      `shared memory is not supported: ${kind} '${name}' sets '${shared}'`,
    );
  }
}
