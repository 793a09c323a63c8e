import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { status } from "@grpc/grpc-js";
import { getJson } from "../support/http-client.ts";
import { type OvmsServer, SILERO_OVMS, startOvmsServer } from "../tfs/support/ovms-server.ts";
import { TfsClient } from "../tfs/support/tfs-client.ts";
import {
  type Endpoints,
  pipelinedRestSteps,
  type StepOutcome,
  step,
  type Transport,
} from "../tfs/support/vad-steps.ts";

// OpenVINO Model Server's stateful error table (its stateful-models guide and status
// tables), over gRPC and REST, on Silero VAD listed in a config.json as an OVMS user
// lists it: every row with its gRPC code, HTTP status and exact message. Also how ids
// are given: assigned on a start without one, 0 meaning none, 2^64-1 exact. A request
// refused for a bad special input leaves its sequence as it was.

const START = 1;
const END = 2;
const UINT64_MAX = (1n << 64n) - 1n;

let ovms: OvmsServer;
let endpoints: Endpoints;
before(async () => {
  ovms = await startOvmsServer({
    vad: SILERO_OVMS,
    vad_small: { config: { stateful: true, max_sequence_number: 2 }, onnx: SILERO_OVMS.onnx },
    vad_cleanup_off: { config: { stateful: true, idle_sequence_cleanup: false }, onnx: SILERO_OVMS.onnx },
  });
  endpoints = { grpc: new TfsClient(ovms.grpcPort), url: ovms.url };
});
after(async () => {
  endpoints.grpc.close();
  await ovms.stop();
});

/** The gRPC code and HTTP status of each row. */
const CODES = {
  missing: [status.NOT_FOUND, 404],
  exists: [status.ALREADY_EXISTS, 409],
  ending: [status.FAILED_PRECONDITION, 412],
  limit: [status.UNAVAILABLE, 503],
  invalid: [status.INVALID_ARGUMENT, 400],
} as const;

function assertRefused(
  outcome: StepOutcome,
  transport: Transport,
  codes: readonly [number, number],
  message: string,
): void {
  assert.equal(
    outcome.ok,
    false,
    `refused: ${JSON.stringify(outcome, (_, v) => (typeof v === "bigint" ? `${v}` : v))}`,
  );
  if (outcome.ok) return;
  assert.equal(outcome.code, transport === "grpc" ? codes[0] : codes[1]);
  assert.equal(outcome.message, message);
}

function ok(outcome: StepOutcome): { id: bigint; output: number } {
  if (!outcome.ok) assert.fail(`refused: ${outcome.code} ${outcome.message}`);
  return outcome;
}

/** Distinct ids per transport and test, so rows never see each other's sequences. */
let nextId = 1000n;
const freshId = (): bigint => nextId++;

for (const transport of ["grpc", "rest"] as const) {
  describe(`OVMS's stateful error table over ${transport === "grpc" ? "gRPC" : "REST"}`, () => {
    const send = (model: string, request: Parameters<typeof step>[3]) =>
      step(endpoints, transport, model, request);

    it("an unknown id, and an id whose sequence ended: NOT_FOUND / 404", async () => {
      assertRefused(
        await send("vad", { id: freshId() }),
        transport,
        CODES.missing,
        "Sequence with provided ID does not exist",
      );
      const id = freshId();
      ok(await send("vad", { id, control: START }));
      ok(await send("vad", { id, control: END }));
      assertRefused(
        await send("vad", { id }),
        transport,
        CODES.missing,
        "Sequence with provided ID does not exist",
      );
      assertRefused(
        await send("vad", { id, control: END }),
        transport,
        CODES.missing,
        "Sequence with provided ID does not exist",
      );
    });

    it("a start on an id in use: ALREADY_EXISTS / 409, and the live sequence goes on", async () => {
      const id = freshId();
      ok(await send("vad", { id, control: START }));
      assertRefused(
        await send("vad", { id, control: START }),
        transport,
        CODES.exists,
        "Sequence with provided ID already exists",
      );
      ok(await send("vad", { id }));
      ok(await send("vad", { id, control: END }));
    });

    it("a start on an id whose end request is still running: FAILED_PRECONDITION / 412", async () => {
      const id = freshId();
      ok(await send("vad", { id, control: START }));
      // Sent together (one gRPC channel; one pipelined HTTP connection): the start
      // arrives while the end is queued or running.
      const pair = [
        { id, control: END },
        { id, control: START },
      ];
      const [ended, restarted] =
        transport === "grpc"
          ? await Promise.all(pair.map((request) => send("vad", request)))
          : await pipelinedRestSteps(ovms.url, "vad", pair);
      ok(ended!);
      assertRefused(
        restarted!,
        transport,
        CODES.ending,
        "Sequence last request is being processed and it's not available anymore",
      );
      // Once the end has run, the id is free again.
      ok(await send("vad", { id, control: START }));
      ok(await send("vad", { id, control: END }));
    });

    it("max_sequence_number reached: UNAVAILABLE / 503 at once, and room again after an end", async () => {
      const [a, b] = [freshId(), freshId()];
      ok(await send("vad_small", { id: a, control: START }));
      ok(await send("vad_small", { id: b, control: START }));
      assertRefused(
        await send("vad_small", { id: freshId(), control: START }),
        transport,
        CODES.limit,
        "Max sequence number has been reached. Could not create new sequence.",
      );
      assertRefused(
        await send("vad_small", { control: START }),
        transport,
        CODES.limit,
        "Max sequence number has been reached. Could not create new sequence.",
      );
      // A full model says so before it says the id is taken, as OVMS's sequence manager did.
      assertRefused(
        await send("vad_small", { id: a, control: START }),
        transport,
        CODES.limit,
        "Max sequence number has been reached. Could not create new sequence.",
      );
      ok(await send("vad_small", { id: a, control: END }));
      ok(
        await send("vad_small", { control: START }).then((o) =>
          o.ok ? send("vad_small", { id: o.id, control: END }) : o,
        ),
      );
      ok(await send("vad_small", { id: b, control: END }));
    });

    it("no id on a request that is not a start (absent, or 0): INVALID_ARGUMENT / 400", async () => {
      const message = "Sequence ID has not been provided in request inputs";
      assertRefused(await send("vad", {}), transport, CODES.invalid, message);
      assertRefused(await send("vad", { id: 0n }), transport, CODES.invalid, message);
      assertRefused(await send("vad", { id: 0n, control: END }), transport, CODES.invalid, message);
      assertRefused(await send("vad", { control: END }), transport, CODES.invalid, message);
    });

    it("a control value other than 0, 1, 2: INVALID_ARGUMENT / 400, the sequence untouched", async () => {
      const id = freshId();
      const first = ok(await send("vad", { id, control: START }));
      assertRefused(
        await send("vad", { id, control: 3 }),
        transport,
        CODES.invalid,
        "Unexpected value of sequence control input",
      );
      assertRefused(
        await send("vad", { id, control: 7 }),
        transport,
        CODES.invalid,
        "Unexpected value of sequence control input",
      );
      // The refused requests did not run: the next step is the sequence's second.
      const reference = freshId();
      const expected = ok(await send("vad", { id: reference, control: START }));
      assert.equal(first.output, expected.output);
      const [second, expectedSecond] = [await send("vad", { id }), await send("vad", { id: reference })];
      assert.equal(ok(second).output, ok(expectedSecond).output);
      ok(await send("vad", { id, control: END }));
      ok(await send("vad", { id: reference, control: END }));
    });

    it("a special input of the wrong shape: INVALID_ARGUMENT / 400 naming the required shape", async () => {
      const grpc = transport === "grpc";
      const twoIds = grpc
        ? {
            grpcSpecials: {
              sequence_id: {
                dtype: "DT_UINT64",
                tensor_shape: { dim: [{ size: 2 }] },
                uint64_val: ["5", "6"],
              },
            },
          }
        : { restSpecials: { sequence_id: "[5, 6]" } };
      assertRefused(
        await send("vad", { control: START, ...twoIds }),
        transport,
        CODES.invalid,
        "Invalid input shape - Required shape for sequence_id is: (1)",
      );
      const twoControls = grpc
        ? {
            grpcSpecials: {
              sequence_control_input: {
                dtype: "DT_UINT32",
                tensor_shape: { dim: [{ size: 1 }, { size: 1 }] },
                uint32_val: [1],
              },
            },
          }
        : { restSpecials: { sequence_control_input: "[[1]]" } };
      const refused = await send("vad", { id: freshId(), ...twoControls });
      assertRefused(
        refused,
        transport,
        CODES.invalid,
        grpc
          ? "Invalid number of shape dimensions - Required shape for sequence_control_input is: (1)"
          : "Could not parse input content. Not valid ndarray detected",
      );
    });

    if (transport === "grpc") {
      it("gRPC: an id outside uint64_val, a control outside uint32_val, a special input without shape", async () => {
        const id = freshId();
        const inInt64 = { dtype: "DT_UINT64", tensor_shape: { dim: [{ size: 1 }] }, int64_val: [String(id)] };
        const asContent = {
          dtype: "DT_UINT64",
          tensor_shape: { dim: [{ size: 1 }] },
          tensor_content: Buffer.from(BigUint64Array.of(id).buffer),
        };
        for (const sequence_id of [inInt64, asContent]) {
          assertRefused(
            await send("vad", { control: START, grpcSpecials: { sequence_id } }),
            transport,
            CODES.invalid,
            "Could not find sequence id in expected tensor proto field uint64_val",
          );
        }
        const controlInInt = { dtype: "DT_UINT32", tensor_shape: { dim: [{ size: 1 }] }, int_val: [1] };
        assertRefused(
          await send("vad", { id, grpcSpecials: { sequence_control_input: controlInInt } }),
          transport,
          CODES.invalid,
          "Could not find sequence control input in expected tensor proto field uint32_val",
        );
        for (const grpcSpecials of [
          { sequence_id: { dtype: "DT_UINT64", uint64_val: [String(id)] } },
          { sequence_control_input: { dtype: "DT_UINT32", tensor_shape: { dim: [] }, uint32_val: [1] } },
        ]) {
          assertRefused(
            await send("vad", { id, control: START, grpcSpecials }),
            transport,
            CODES.invalid,
            "Special input proto does not contain tensor shape information",
          );
        }
        // None of those started anything.
        assertRefused(
          await send("vad", { id }),
          transport,
          CODES.missing,
          "Sequence with provided ID does not exist",
        );
      });
    } else {
      it("REST: a special input that is not a list of unsigned integers is not a valid ndarray", async () => {
        // `[5.0]` and `[1e3]` too: rapidjson reads them as doubles, which OVMS refuses.
        for (const value of ["5", "[-1]", "[1.5]", "[5.0]", "[1e3]", '["7"]', "[18446744073709551616]"]) {
          assertRefused(
            await send("vad", { control: START, restSpecials: { sequence_id: value } }),
            transport,
            CODES.invalid,
            "Could not parse input content. Not valid ndarray detected",
          );
        }
        assertRefused(
          await send("vad", { id: freshId(), restSpecials: { sequence_control_input: "[4294967296]" } }),
          transport,
          CODES.invalid,
          "Could not parse input content. Not valid ndarray detected",
        );
        assertRefused(
          await send("vad", { id: freshId(), restSpecials: { sequence_control_input: "[1.0]" } }),
          transport,
          CODES.invalid,
          "Could not parse input content. Not valid ndarray detected",
        );
      });
    }

    it("ids: assigned on a start without one (or with 0), counting from 1 past live ids as OVMS does, returned in sequence_id, usable after", async () => {
      const assigned = ok(await send("vad", { control: START }));
      // OVMS's SequenceManager counts from 1 (exact for any client, JSON.parse's included).
      assert.ok(assigned.id > 0n && assigned.id < 1000n, String(assigned.id));
      // A client's own live id is skipped.
      const taken = assigned.id + 2n;
      ok(await send("vad", { id: taken, control: START }));
      const zero = ok(await send("vad", { id: 0n, control: START }));
      const next = ok(await send("vad", { control: START }));
      assert.deepEqual([zero.id, next.id], [assigned.id + 1n, assigned.id + 3n]);
      for (const id of [assigned.id, zero.id, taken, next.id]) {
        assert.equal(ok(await send("vad", { id })).id, id);
        assert.equal(ok(await send("vad", { id, control: END })).id, id);
      }
      // The counter stays on the last id it gave: ended, that id is given again, as OVMS's.
      const again = ok(await send("vad", { control: START }));
      assert.equal(again.id, next.id);
      assert.equal(ok(await send("vad", { id: again.id, control: END })).id, again.id);
    });

    it("ids: 2^64-1 round-trips exactly, and every response carries sequence_id", async () => {
      const started = ok(await send("vad", { id: UINT64_MAX, control: START }));
      assert.equal(started.id, UINT64_MAX);
      assert.equal(ok(await send("vad", { id: UINT64_MAX })).id, UINT64_MAX);
      assert.equal(ok(await send("vad", { id: UINT64_MAX, control: END })).id, UINT64_MAX);
      assertRefused(
        await send("vad", { id: UINT64_MAX }),
        transport,
        CODES.missing,
        "Sequence with provided ID does not exist",
      );
    });
  });
}

describe("what the error table leaves behind", () => {
  it("an end request whose run fails still ends its sequence (OVMS leaked it)", async () => {
    for (const transport of ["grpc", "rest"] as const) {
      const id = freshId();
      ok(await step(endpoints, transport, "vad", { id, control: START }));
      // Three samples are too few for the model's STFT: the run fails after admission.
      const failed = await step(endpoints, transport, "vad", {
        id,
        control: END,
        audio: new Float32Array(3),
      });
      assert.equal(failed.ok, false, JSON.stringify(failed));
      // The id is free at once: not "already exists", not "still being processed".
      ok(await step(endpoints, transport, "vad", { id, control: START }));
      ok(await step(endpoints, transport, "vad", { id, control: END }));
    }
    const { summary } = (await getJson(`${ovms.url}/v2/models/vad/sequences`)).body as {
      summary: { live: number; state_bytes: number };
    };
    assert.deepEqual([summary.live, summary.state_bytes], [0, 0]);
  });

  it("idle_sequence_cleanup false: the sequence is never reaped (no idle timeout)", async () => {
    const config = (await getJson(`${ovms.url}/v2/models/vad_cleanup_off/config`)).body as {
      parameters: Record<string, { string_value: string }>;
    };
    assert.equal(config.parameters.sequence_idle_timeout?.string_value, "never");
    const vad = (await getJson(`${ovms.url}/v2/models/vad/config`)).body as {
      sequence_batching: { max_sequence_idle_microseconds: number };
    };
    assert.equal(vad.sequence_batching.max_sequence_idle_microseconds, 5 * 60 * 1_000_000);
  });
});
