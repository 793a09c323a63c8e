import { invalidArg, notFound, ServerError } from "../../../core/errors.ts";
import { CLIENT_SHM_DISABLED, type SharedMemoryRegions } from "../../../core/shared-memory.ts";

// Triton's CUDA shared memory API, answered as a Triton built without GPU support answers
// it (seqserve runs on the CPU): nothing can be registered, so there is never a region to
// list or to unregister. Shared by HTTP and gRPC.

/**
 * The CUDA regions, or the one named: there are none. A system region of that name is
 * pointed out to the caller who may see it (`principal`'s own, or no one's).
 */
export function cudaSharedMemoryStatus(
  regions: SharedMemoryRegions,
  name: string | undefined,
  principal: string | undefined,
): [] {
  if (name === undefined) return [];
  if (regions.status(undefined, principal).some((region) => region.name === name)) {
    throw notFound(
      `The region named '${name}' is registered as system shared memory, not CUDA shared memory`,
    );
  }
  throw notFound(`Unable to find cuda shared memory region: '${name}'`);
}

export function registerCudaSharedMemory(name: string): never {
  throw invalidArg(`failed to register CUDA shared memory region: '${name}', GPUs not supported`);
}

/** Unregistering CUDA regions succeeds (there are none) where clients may register any. */
export function unregisterCudaSharedMemory(regions: SharedMemoryRegions): void {
  if (!regions.clientRegistration) throw new ServerError("UNSUPPORTED", CLIENT_SHM_DISABLED);
}
