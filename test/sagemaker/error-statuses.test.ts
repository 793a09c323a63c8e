import assert from "node:assert/strict";
import type { AddressInfo } from "node:net";
import { after, before, describe, it } from "node:test";
import { ERROR_CODES, type ErrorCode } from "../../src/core/errors.ts";
import {
  createSageMakerFrontend,
  type SageMakerFrontend,
} from "../../src/frontends/sagemaker/sagemaker-frontend.ts";
import { silentLogger } from "../../src/observability/logger.ts";
import { fakeServer } from "../http/support/fake-context.ts";
import { send } from "../http/support/http-server.ts";

// The SageMaker family's own table: each error code a model fails with answers the
// status Triton's SageMaker mode gives it (its HTTP API's), with SageMaker's error type.

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

const ERROR_TYPE: Record<number, string> = {
  400: "ValidationError",
  401: "ValidationError",
  403: "ValidationError",
  404: "ValidationError",
  429: "ModelNotReadyException",
  500: "InternalFailure",
  501: "InternalFailure",
  503: "ServiceUnavailable",
  504: "InternalFailure",
};

describe("the SageMaker error table", () => {
  let app: SageMakerFrontend;
  let port: number;
  before(async () => {
    app = createSageMakerFrontend({
      context: fakeServer().context,
      logger: silentLogger(),
      sessionTtlSecs: 60,
      defaultModel: "error",
    });
    await app.listen({ port: 0, host: "127.0.0.1" });
    port = (app.server.address() as AddressInfo).port;
  });
  after(() => app.close());

  for (const code of ERROR_CODES) {
    it(`a model failing with ${code} answers /invocations ${EXPECTED[code]}`, async () => {
      const body = JSON.stringify({ parameters: { code }, inputs: [] });
      const response = await send({ port }, "POST", "/invocations", body, {
        "content-type": "application/json",
      });
      assert.equal(response.status, EXPECTED[code]);
      const message = `model failed with ${code}`;
      assert.deepEqual(JSON.parse(response.body.toString()), { error: message, message });
      assert.equal(response.headers["x-amzn-errortype"], ERROR_TYPE[EXPECTED[code]]);
    });
  }
});
