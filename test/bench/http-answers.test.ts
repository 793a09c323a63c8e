import assert from "node:assert/strict";
import { test } from "node:test";
import { StepError } from "../../src/bench/clients/bench-client.ts";
import { check } from "../../src/bench/clients/http-clients.ts";

// The HTTP clients' errors are counted by status, with the server's message: a ModelError
// from SageMaker's runtime path (sagemaker-stream) by the container's status and message
// inside it, as over /invocations, so one failure reads the same whichever path it took.

const answer = (status: number, body: unknown) => ({
  status,
  headers: {},
  body: Buffer.from(typeof body === "string" ? body : JSON.stringify(body)),
});

const failure = (status: number, body: unknown): StepError => {
  try {
    check(answer(status, body));
  } catch (error) {
    assert.ok(error instanceof StepError);
    return error;
  }
  throw new Error("the answer was taken as a success");
};

test("an error answer is counted by its status, with the server's message", () => {
  const error = failure(400, { error: "unknown session id 'abc'" });
  assert.deepEqual([error.kind, error.message], ["http 400", "unknown session id 'abc'"]);
  assert.equal(failure(502, "bad gateway").message, "bad gateway");
});

test("a ModelError is counted by the container's status and message inside it", () => {
  const original = JSON.stringify({ error: "negative input -1", message: "negative input -1" });
  const error = failure(424, {
    ErrorCode: "INTERNAL_FAILURE_FROM_MODEL",
    Message: `Received server error (500) from primary with message "${original}".`,
    OriginalMessage: original,
    OriginalStatusCode: 500,
  });
  assert.deepEqual([error.kind, error.message], ["http 500", "negative input -1"]);
});

test("a success is the answer itself", () => {
  const ok = answer(200, "{}");
  assert.equal(check(ok), ok);
});
