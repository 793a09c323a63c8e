import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { ERROR_CODES, type ErrorCode, INTERNAL_ERROR_MESSAGE } from "../../src/core/errors.ts";
import { KSERVE_HTTP_STATUS } from "../../src/frontends/common/kserve/error-status.ts";
import { postJson, startServer, type TestServer } from "./support/http-server.ts";

const EXPECTED: Record<ErrorCode, number> = {
  INVALID_ARG: 400,
  ALREADY_EXISTS: 400,
  CANCELLED: 400,
  UNKNOWN: 400,
  FAILED_PRECONDITION: 400,
  NOT_FOUND: 404,
  RESOURCE_EXHAUSTED: 429,
  UNAUTHENTICATED: 401,
  PERMISSION_DENIED: 403,
  INTERNAL: 500,
  UNSUPPORTED: 501,
  UNAVAILABLE: 503,
  DEADLINE_EXCEEDED: 504,
};

describe("the KServe error table", () => {
  let server: TestServer;
  before(async () => {
    server = await startServer();
  });
  after(() => server.close());

  it("has a status for every error code", () => {
    for (const code of ERROR_CODES) assert.equal(KSERVE_HTTP_STATUS[code], EXPECTED[code], code);
  });

  for (const code of ERROR_CODES) {
    it(`a model failing with ${code} answers ${EXPECTED[code]} and the message`, async () => {
      const response = await postJson(server, "/v2/models/error/infer", { parameters: { code }, inputs: [] });
      assert.equal(response.status, EXPECTED[code]);
      assert.deepEqual(response.json, { error: `model failed with ${code}` });
      assert.equal(response.headers.get("retry-after"), null);
    });
  }

  it("UNAVAILABLE with a retry hint carries Retry-After in whole seconds", async () => {
    const response = await postJson(server, "/v2/models/error/infer", {
      parameters: { code: "UNAVAILABLE", retry_after: 2.5 },
      inputs: [],
    });
    assert.equal(response.status, 503);
    assert.equal(response.headers.get("retry-after"), "3");
  });

  it("an unexpected exception is a 500 whose message tells nothing of the server's code", async () => {
    const response = await postJson(server, "/v2/models/crash/infer", { inputs: [] });
    assert.equal(response.status, 500);
    assert.deepEqual(response.json, { error: INTERNAL_ERROR_MESSAGE });
  });

  it("an unknown model is a 404", async () => {
    const response = await postJson(server, "/v2/models/nope/versions/2/infer", { inputs: [] });
    assert.equal(response.status, 404);
    assert.deepEqual(response.json, { error: "Request for unknown model: 'nope' version 2 is not found" });
  });
});
