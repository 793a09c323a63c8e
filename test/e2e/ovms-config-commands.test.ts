import assert from "node:assert/strict";
import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { BIN, freePort, run, ServerProcess } from "../support/seqserve-process.ts";
import { SILERO_PATH } from "../support/silero-oracle.ts";

// OVMS's config commands, run as an OVMS user runs them: `--add_to_config` lists a model
// in config.json (name and base path; the file created when it is not there), and
// `--remove_from_config` takes it out; each writes the file and exits, serving nothing,
// with OVMS's words. A server watching the file serves the model added. (seqserve refused
// them as unknown options.)

describe("OVMS's --add_to_config and --remove_from_config", { timeout: 120_000 }, () => {
  let dir: string;
  let config: string;
  const entries = () =>
    (
      JSON.parse(readFileSync(config, "utf8")) as { model_config_list: { config: unknown }[] }
    ).model_config_list.map((entry) => entry.config);
  before(() => {
    dir = mkdtempSync(join(tmpdir(), "seqserve-ovms-config-commands-"));
    config = join(dir, "config.json");
    for (const name of ["vad", "vad2"]) {
      mkdirSync(join(dir, "models", name, "1"), { recursive: true });
      copyFileSync(SILERO_PATH, join(dir, "models", name, "1", "model.onnx"));
    }
  });
  after(() => rmSync(dir, { recursive: true, force: true }));

  it("adds to a file it creates, and to a file there; refuses a name listed; removes by name", async () => {
    const first = await run([
      "--add_to_config",
      "--config_path",
      config,
      "--model_name",
      "vad",
      "--model_path",
      "models/vad",
    ]);
    assert.deepEqual([first.code, first.stdout], [0, `Config updated: ${config}\n`], first.stderr);
    assert.deepEqual(entries(), [{ name: "vad", base_path: "models/vad" }]);

    // The model's folder in the repository; the config path from the environment's repository.
    const second = await run(["--add_to_config", "--model_name", "vad2"], {
      OVMS_MODEL_REPOSITORY_PATH: join(dir, "models"),
    });
    assert.equal(second.code, 0, second.stderr + second.stdout);
    const defaultConfig = join(dir, "models", "config.json");
    assert.equal(
      second.stdout,
      `Using default config path: ${defaultConfig}\nConfig updated: ${defaultConfig}\n`,
    );
    const third = await run([
      "--add_to_config",
      "--config_path",
      config,
      "--model_name",
      "vad2",
      "--model_repository_path",
      join(dir, "models"),
    ]);
    assert.equal(third.code, 0, third.stderr + third.stdout);
    assert.deepEqual(entries(), [
      { name: "vad", base_path: "models/vad" },
      { name: "vad2", base_path: join(dir, "models", "vad2") },
    ]);

    const twice = await run([
      "--add_to_config",
      "--config_path",
      config,
      "--model_name",
      "vad",
      "--model_path",
      "x",
    ]);
    assert.deepEqual(
      [twice.code, twice.stdout],
      [1, `${config} error on config update : Given model name is already occupied\n`],
    );
    const removed = await run(["--remove_from_config", "--config_path", config, "--model_name", "vad"]);
    assert.deepEqual([removed.code, removed.stdout], [0, `Config updated: ${config}\n`], removed.stderr);
    assert.deepEqual(entries(), [{ name: "vad2", base_path: join(dir, "models", "vad2") }]);
    const again = await run(["--remove_from_config", "--config_path", config, "--model_name", "vad"]);
    assert.deepEqual(
      [again.code, again.stdout],
      [1, `${config} error on config update : Model with requested name is not found\n`],
    );
  });

  it("answers a missing file, a folder and a file that is not JSON as OVMS does", async () => {
    const missing = join(dir, "none.json");
    const remove = await run(["--remove_from_config", "--config_path", missing, "--model_name", "m"]);
    assert.deepEqual(
      [remove.code, remove.stdout],
      [1, `${missing} error on config update : The provided base path is invalid or doesn't exists\n`],
    );
    const folder = await run([
      "--add_to_config",
      "--config_path",
      dir,
      "--model_name",
      "m",
      "--model_path",
      "m",
    ]);
    assert.deepEqual(
      [folder.code, folder.stdout],
      [1, `${dir} error on config update : The file is not valid json\n`],
    );
    const broken = join(dir, "broken.json");
    writeFileSync(broken, "{ not json");
    const notJson = await run(["--remove_from_config", "--config_path", broken, "--model_name", "m"]);
    assert.deepEqual(
      [notJson.code, notJson.stdout],
      [1, `${broken} error on config update : The file is not valid json\n`],
    );
    assert.equal(readFileSync(broken, "utf8"), "{ not json", "a refused edit leaves the file alone");
  });

  it("refuses what OVMS refuses, with exit code 2 and OVMS's words", async () => {
    const cases: [string[], RegExp][] = [
      [
        ["--add_to_config", "--model_name", "m", "--model_path", "m"],
        /Set config_path with add_to_config\/remove_from_config/,
      ],
      [
        ["--remove_from_config", "--config_path", config],
        /Set model_name with add_to_config\/remove_from_config/,
      ],
      [
        ["--add_to_config", "--config_path", config, "--model_name", "m"],
        /Set model_name either with model_path or model_repository_path with add_to_config/,
      ],
      [
        [
          "--add_to_config",
          "--config_path",
          config,
          "--model_name",
          "m",
          "--model_path",
          "m",
          "--stateful",
          "--max_sequence_number",
          "4",
        ],
        /allows passing only model_name and model_path parameters. Invalid parameters passed: max_sequence_number, stateful/,
      ],
      [
        ["--remove_from_config", "--config_path", config, "--model_name", "m", "--model_path", "m"],
        /--model_path cannot be used with --remove_from_config/,
      ],
      [["--list_models", "--model_repository_path", dir], /--list_models is not supported by seqserve/],
    ];
    const before = readFileSync(config, "utf8");
    for (const [args, message] of cases) {
      const exit = await run(args, { OVMS_MODEL_REPOSITORY_PATH: "" });
      assert.equal(exit.code, 2, `${args.join(" ")}: ${exit.stderr}`);
      assert.match(exit.stderr, message);
    }
    assert.equal(readFileSync(config, "utf8"), before);
  });

  it("a server watching the file serves the model added", async () => {
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
      const state = async (model: string) =>
        (await fetch(`http://127.0.0.1:${restPort}/v1/models/${model}`)).status;
      assert.equal(await state("vad"), 404);
      const added = await run([
        "--add_to_config",
        "--config_path",
        config,
        "--model_name",
        "vad",
        "--model_path",
        "models/vad",
      ]);
      assert.equal(added.code, 0, added.stderr + added.stdout);
      let seen = await state("vad");
      for (let tries = 0; seen !== 200 && tries < 300; tries++) {
        await new Promise((resolve) => setTimeout(resolve, 100));
        seen = await state("vad");
      }
      assert.equal(seen, 200);
    } finally {
      await server.stop();
    }
  });
});
