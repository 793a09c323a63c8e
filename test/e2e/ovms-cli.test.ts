import assert from "node:assert/strict";
import { copyFileSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { OVMS_FLAGS, OVMS_IGNORED_FLAGS } from "../../src/cli/ovms-flags.ts";
import { BIN, freePort, run, ServerProcess } from "../support/seqserve-process.ts";
import { SILERO_PATH } from "../support/silero-oracle.ts";
import { TfsClient } from "../tfs/support/tfs-client.ts";
import { grpcStep, restStep } from "../tfs/support/vad-steps.ts";

// An OpenVINO Model Server launch line with the program name changed: single-model mode
// (--model_path / --model_name / --stateful / --max_sequence_number), OVMS's ports
// (--port gRPC, --rest_port HTTP, metrics on the REST port with --metrics_enable), OVMS's
// log level, and flags about OpenVINO accepted with a notice.

describe("OVMS's command line", { timeout: 120_000 }, () => {
  let dir: string;
  before(() => {
    dir = mkdtempSync(join(tmpdir(), "seqserve-ovms-cli-"));
    mkdirSync(join(dir, "vad", "1"), { recursive: true });
    copyFileSync(SILERO_PATH, join(dir, "vad", "1", "model.onnx"));
  });
  after(() => rmSync(dir, { recursive: true, force: true }));

  it("--help lists OVMS's flags, and those accepted without effect", async () => {
    const help = await run(["--help"]);
    assert.equal(help.code, 0);
    for (const flag of OVMS_FLAGS) assert.match(help.stdout, new RegExp(`^  --${flag.name}(\\s|\\[|$)`, "m"));
    for (const flag of Object.keys(OVMS_IGNORED_FLAGS)) assert.ok(help.stdout.includes(`--${flag}`), flag);
  });

  it("refuses what OVMS refuses, with exit code 2 and a message naming the flag", async () => {
    const cases: [string[], RegExp][] = [
      [["--model_path", join(dir, "vad")], /needs both --model_path <dir> and --model_name <name>/],
      [
        ["--model_path", join(dir, "vad"), "--model_name", "vad", "--max_sequence_number", "5"],
        /--max_sequence_number applies to stateful models only: add --stateful/,
      ],
      [
        ["--model_path", join(dir, "nope"), "--model_name", "vad"],
        /--model_path '.*nope' is not a directory/,
      ],
      [
        ["--model_path", join(dir, "vad"), "--model_name", "vad", "--log_level", "LOUD"],
        /--log_level must be one of TRACE, DEBUG, INFO, WARNING, ERROR/,
      ],
      [["--stateful"], /--stateful applies to a model given with --model_path/],
      // OVMS's Config::validate.
      [
        ["--model_path", join(dir, "vad"), "--model_name", "vad", "--port", "0", "--rest_port", "0"],
        /port and rest_port cannot both be unset/,
      ],
      [
        ["--model_path", join(dir, "vad"), "--model_name", "vad", "--port", "18001", "--rest_port", "18001"],
        /port and rest_port cannot have the same values/,
      ],
    ];
    for (const [args, message] of cases) {
      const exit = await run(args);
      assert.equal(exit.code, 2, `${args.join(" ")}: ${exit.stderr}`);
      assert.match(exit.stderr, message);
    }
  });

  it("with --config_path, a model that does not load leaves the others served, and loads once its folder is there", async () => {
    const config = join(dir, "config.json");
    const later = join(dir, "later");
    writeFileSync(
      config,
      JSON.stringify({
        model_config_list: [
          { config: { name: "later", base_path: later } },
          { config: { name: "vad", base_path: join(dir, "vad"), stateful: true } },
        ],
      }),
    );
    const restPort = await freePort();
    const server = new ServerProcess(process.execPath, [
      BIN,
      "--config_path",
      config,
      "--rest_port",
      String(restPort),
      "--file_system_poll_wait_seconds",
      "1",
      "--host",
      "127.0.0.1",
    ]);
    try {
      await server.listening;
      const url = `http://127.0.0.1:${restPort}`;
      const state = async (model: string) => {
        const response = await fetch(`${url}/v1/models/${model}`);
        const body = (await response.json()) as { model_version_status?: { state: string }[] };
        return `${response.status} ${body.model_version_status?.[0]?.state ?? ""}`;
      };
      assert.equal(await state("vad"), "200 AVAILABLE");
      assert.notEqual(await state("later"), "200 AVAILABLE");
      mkdirSync(join(later, "1"), { recursive: true });
      copyFileSync(SILERO_PATH, join(later, "1", "model.onnx"));
      let seen = await state("later");
      for (let tries = 0; seen !== "200 AVAILABLE" && tries < 300; tries++) {
        await new Promise((resolve) => setTimeout(resolve, 100));
        seen = await state("later");
      }
      assert.equal(seen, "200 AVAILABLE");
    } finally {
      await server.stop();
    }
  });

  it("single-model mode serves a stateful model on OVMS's ports, with OVMS's limits", async () => {
    const [grpcPort, restPort] = [await freePort(), await freePort()];
    const server = new ServerProcess(process.execPath, [
      BIN,
      "--model_path",
      join(dir, "vad"),
      "--model_name",
      "vad",
      "--stateful",
      "--max_sequence_number",
      "2",
      "--idle_sequence_cleanup",
      "false",
      "--port",
      String(grpcPort),
      "--rest_port",
      String(restPort),
      "--metrics_enable",
      "--nireq",
      "4",
      "--target_device",
      "GPU",
      "--log_level",
      "INFO",
      "--log-format",
      "json",
      "--host",
      "127.0.0.1",
    ]);
    try {
      const listening = await server.listening;
      assert.deepEqual(
        [listening.grpc_port, listening.http_port, listening.metrics_port],
        [grpcPort, restPort, null],
      );
      // --metrics_enable: no metrics port, the metrics on the REST port, and the line says so.
      const line = server.lines.find((l) => l.event === "listening")!;
      assert.equal(line.metrics_on_http_port, true);
      assert.match(String(line.msg), new RegExp(`, metrics on HTTP 127\\.0\\.0\\.1:${restPort},`));
      const client = new TfsClient(grpcPort);
      try {
        const url = `http://127.0.0.1:${restPort}`;
        const first = await grpcStep(client, "vad", { id: 5n, control: 1 });
        const second = await restStep(url, "vad", { control: 1 });
        assert.ok(
          first.ok && second.ok,
          JSON.stringify([first, second], (_, v) => (typeof v === "bigint" ? `${v}` : v)),
        );
        const third = await grpcStep(client, "vad", { control: 1 });
        assert.deepEqual(third, {
          ok: false,
          code: 14,
          message: "Max sequence number has been reached. Could not create new sequence.",
        });
        assert.equal((await restStep(url, "vad", { id: 5n, control: 2 })).ok, true);
        const config = (await (await fetch(`${url}/v2/models/vad/config`)).json()) as {
          parameters: Record<string, { string_value: string }>;
        };
        assert.equal(config.parameters.sequence_idle_timeout?.string_value, "never");
        // --metrics_enable: the metrics on the REST port, as OVMS serves them (no port of their own).
        const metrics = await fetch(`${url}/metrics`);
        assert.equal(metrics.status, 200);
        const text = await metrics.text();
        assert.match(text, /^nv_inference_request_success\{model="vad",version="1"\} [1-9]/m);
        // OVMS's own families, for an OVMS user's dashboards: the REST and gRPC predictions above.
        assert.match(
          text,
          /^ovms_requests_success\{api="TensorFlowServing",interface="REST",method="Predict",name="vad",version="1"\} [1-9]/m,
        );
        assert.match(
          text,
          /^ovms_requests_fail\{api="TensorFlowServing",interface="gRPC",method="Predict",name="vad",version="1"\} [1-9]/m,
        );
      } finally {
        client.close();
      }
    } finally {
      const exit = await server.stop();
      // Sequences were left open: as OVMS, the stop does not wait for them (nor for the exit
      // timeout, 30 s), and is clean (0).
      assert.equal(exit.code, 0, exit.stderr);
      assert.ok(!server.lines.some((l) => String(l.msg).includes("Exit timeout expired")));
      // One line each in the server's log.
      const notices = server.lines.filter((l) => l.event === "option_notice").map((l) => String(l.msg));
      assert.ok(
        notices.some((n) => /--nireq has no effect in seqserve/.test(n)),
        JSON.stringify(notices),
      );
      assert.ok(
        notices.some((n) =>
          /--target_device has no effect in seqserve: seqserve runs ONNX models on the CPU/.test(n),
        ),
      );
    }
  });
});
