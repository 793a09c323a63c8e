import fastifySwagger from "@fastify/swagger";
import type { FastifyServerOptions } from "fastify";
import type { HttpApp } from "./http-app.ts";

// Every HTTP protocol family's server documents itself: GET /openapi.json is an OpenAPI 3
// document generated from the schemas its routes declare. A family documents a route by
// giving it a `schema` (built with the helpers below); nothing else is needed, and nothing
// is written by hand. The schemas describe; they are not used to check requests or to
// shape answers (each family checks requests itself, with messages in its protocol's
// words, and writes its answers itself), so the server sets fastify to check nothing.

export interface OpenApiInfo {
  readonly title: string;
  readonly version: string;
  readonly description: string;
}

/** The path of the document on every HTTP server. */
const OPENAPI_PATH = "/openapi.json";

type JsonSchema = Record<string, unknown>;

/** A response (or body) of JSON described by `schema`. */
export function jsonContent(schema: JsonSchema): { content: Record<string, { schema: JsonSchema }> } {
  return { content: { "application/json": { schema } } };
}

/** Raw bytes, in either direction. */
export const BINARY_SCHEMA: JsonSchema = { type: "string", format: "binary" };

/** An answer with no body. */
export function emptyResponse(description: string): JsonSchema {
  return { description, type: "null" };
}

/** A path parameter of text. */
export function pathParams(
  names: readonly string[],
  descriptions: Readonly<Record<string, string>>,
): JsonSchema {
  return {
    type: "object",
    properties: Object.fromEntries(names.map((n) => [n, { type: "string", description: descriptions[n] }])),
    required: [...names],
  };
}

/**
 * Set to true in a route's schema whose body may be left out: @fastify/swagger marks every
 * described body required (fastify's own rule when it checks bodies, which this server
 * does not), so such routes are marked again when the document is made.
 */
export const OPTIONAL_BODY = "x-optional-body";

type Operations = Record<string, Record<string, Record<string, unknown>>>;

function markOptionalBodies({ openapiObject }: { openapiObject: Record<string, unknown> }) {
  for (const operations of Object.values((openapiObject.paths ?? {}) as Operations)) {
    for (const operation of Object.values(operations)) {
      if (operation[OPTIONAL_BODY] !== true) continue;
      delete operation[OPTIONAL_BODY];
      const body = operation.requestBody as { required?: boolean } | undefined;
      if (body !== undefined) body.required = false;
    }
  }
  return openapiObject;
}

/**
 * fastify's `schemaController` for schemas that only describe: requests pass unchecked and
 * answers are written as JSON. Given when the app is made, so fastify never loads its
 * default compilers (ajv and fast-json-stringify, 1.2 MB of heap in every server) only
 * for them to be replaced.
 */
export const DESCRIBING_SCHEMAS = {
  compilersFactory: {
    buildValidator: () => () => () => true,
    buildSerializer: () => () => (data: unknown) => JSON.stringify(data),
  },
} as unknown as FastifyServerOptions["schemaController"];

/** Registers the document and its route on `app`, before the families add their routes. */
export function documentRoutes(app: HttpApp, info: OpenApiInfo): void {
  app.register(fastifySwagger, {
    openapi: {
      openapi: "3.0.3",
      info: { title: info.title, version: info.version, description: info.description },
    },
    transformObject: markOptionalBodies as never,
  });
  app.get(OPENAPI_PATH, { schema: { hide: true } }, (_request, reply) =>
    reply.type("application/json").send(JSON.stringify(app.swagger())),
  );
}
