import type { FastifyInstance, FastifyRequest } from "fastify";
import { invalidArg, ServerError } from "../../core/errors.ts";
import { CLIENT_SHM_DISABLED, type SharedMemoryRegions } from "../../core/shared-memory.ts";
import { readJsonBody } from "../common/http/json-body.ts";
import { sendJson } from "../common/http/json-text.ts";
import {
  cudaSharedMemoryStatus,
  registerCudaSharedMemory,
  unregisterCudaSharedMemory,
} from "../common/kserve/cuda-shared-memory.ts";
import { sharedMemorySchemas } from "./kserve-schemas.ts";

// Triton's shared memory extensions over HTTP: `/v2/systemsharedmemory` and
// `/v2/cudasharedmemory`, each `[/region/{name}]/status|register|unregister`
// (http_server.cc's HandleSystemSharedMemory / HandleCudaSharedMemory). With API keys a
// region belongs to the key that registered it (system-shared-memory.ts).

type RegionRequest = FastifyRequest<{ Params: { region?: string } }>;

interface RegisterRequest {
  readonly key: string;
  readonly offset: number;
  readonly byteSize: number;
}

function byteCount(value: unknown, field: string): number {
  if (typeof value !== "number" || !Number.isSafeInteger(value) || value < 0) {
    throw invalidArg(`Unable to parse '${field}': expected a non-negative integer`);
  }
  return value;
}

/** A system shared memory register body: `{"key": …, "offset": …, "byte_size": …}`. */
function readRegisterRequest(body: Buffer | undefined): RegisterRequest {
  const json = readJsonBody(body) ?? {};
  const { key, offset, byte_size: byteSize } = json;
  if (key === undefined) throw invalidArg("Shared memory register request has no 'key' field");
  if (typeof key !== "string") throw invalidArg("Unable to parse 'key': expected a string");
  if (byteSize === undefined) throw invalidArg("Shared memory register request has no 'byte_size' field");
  return {
    key,
    offset: offset === undefined ? 0 : byteCount(offset, "offset"),
    byteSize: byteCount(byteSize, "byte_size"),
  };
}

export function sharedMemoryRoutes(app: FastifyInstance, regions: SharedMemoryRegions): void {
  for (const named of [false, true]) {
    const region = named ? "/region/:region" : "";
    const system = `/v2/systemsharedmemory${region}`;
    const systemSchemas = sharedMemorySchemas("system", system);
    app.get(`${system}/status`, { schema: systemSchemas.status }, (request: RegionRequest, reply) =>
      sendJson(
        reply,
        regions.status(request.params.region, request.principal).map((r) => ({
          name: r.name,
          key: r.key,
          offset: r.offset,
          byte_size: r.byteSize,
        })),
      ),
    );
    app.post(`${system}/register`, { schema: systemSchemas.register }, (request: RegionRequest, reply) => {
      // Triton's order: whether clients may register, the name, then the body.
      if (!regions.clientRegistration) throw new ServerError("UNSUPPORTED", CLIENT_SHM_DISABLED);
      const name = request.params.region;
      if (name === undefined) {
        throw invalidArg("'region name' is necessary to register system shared memory region");
      }
      const { key, offset, byteSize } = readRegisterRequest(request.body as Buffer | undefined);
      regions.register(name, key, offset, byteSize, request.principal);
      return reply.code(200).send();
    });
    app.post(
      `${system}/unregister`,
      { schema: systemSchemas.unregister },
      (request: RegionRequest, reply) => {
        regions.unregister(request.params.region, request.principal);
        return reply.code(200).send();
      },
    );

    const cuda = `/v2/cudasharedmemory${region}`;
    const cudaSchemas = sharedMemorySchemas("cuda", cuda);
    app.get(`${cuda}/status`, { schema: cudaSchemas.status }, (request: RegionRequest, reply) =>
      sendJson(reply, cudaSharedMemoryStatus(regions, request.params.region, request.principal)),
    );
    app.post(`${cuda}/register`, { schema: cudaSchemas.register }, (request: RegionRequest) => {
      if (!regions.clientRegistration) throw new ServerError("UNSUPPORTED", CLIENT_SHM_DISABLED);
      const name = request.params.region;
      if (name === undefined) {
        throw invalidArg("'region name' is necessary to register cuda shared memory region");
      }
      return registerCudaSharedMemory(name);
    });
    app.post(`${cuda}/unregister`, { schema: cudaSchemas.unregister }, (_request, reply) => {
      unregisterCudaSharedMemory(regions);
      return reply.code(200).send();
    });
  }
}
