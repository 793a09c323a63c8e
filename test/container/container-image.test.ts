import assert from "node:assert/strict";
import { execFile, execFileSync } from "node:child_process";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { promisify } from "node:util";
import { infer, outputData } from "../support/http-client.ts";
import { ROOT } from "../support/seqserve-process.ts";

// The container image. What the Dockerfile promises is checked on the file itself, and
// the image is built and run (serving the example models, healthy by its HEALTHCHECK,
// as SageMaker starts it too) when a container engine answers here and has the base image
// or can pull it; otherwise that part is skipped, saying why. SEQSERVE_TEST_NODE_IMAGE
// names another base image (the Dockerfile's NODE_IMAGE) to build on.

const exec = promisify(execFile);

const dockerfile = readFileSync(join(ROOT, "Dockerfile"), "utf8");
/** Instructions, continuation lines joined, comments dropped. */
const instructions = dockerfile
  .replace(/\\\n/g, " ")
  .split("\n")
  .map((line) => line.trim())
  .filter((line) => line !== "" && !line.startsWith("#"));
const stages = instructions
  .join("\n")
  .split(/^FROM /m)
  .slice(1);
const jsonArgs = (stage: string, name: string): string[] =>
  JSON.parse(
    stage
      .split("\n")
      .find((i) => i.startsWith(`${name} `))!
      .slice(name.length + 1),
  ) as string[];

describe("the Dockerfile", () => {
  it("builds in one stage and runs in another, both on the official Node.js slim image", () => {
    assert.equal(stages.length, 2);
    assert.match(dockerfile, /^ARG NODE_IMAGE=node:\d+-bookworm-slim$/m);
    assert.match(stages[0]!, /^\$\{NODE_IMAGE\} AS build$/m);
    assert.match(stages[1]!, /^\$\{NODE_IMAGE\}$/m);
  });

  const runtime = () => stages[1]!;

  it("runs the compiled server as the unprivileged node user, serving /models by default", () => {
    assert.match(runtime(), /^USER node$/m);
    assert.deepEqual(jsonArgs(runtime(), "ENTRYPOINT"), ["node", "/opt/seqserve/bin/seqserve.js"]);
    assert.deepEqual(jsonArgs(runtime(), "CMD"), ["--model-repository", "/models"]);
    assert.match(runtime(), /^EXPOSE 8000 8001 8002 8080$/m);
    assert.match(runtime(), /^HEALTHCHECK .*CMD \["node", "\/opt\/seqserve\/docker\/healthcheck\.mjs"\]$/m);
  });

  it("copies files that exist, and keeps production dependencies only", () => {
    for (const copy of instructions.filter((i) => i.startsWith("COPY ") && !i.includes("--from="))) {
      for (const source of copy.split(/\s+/).slice(1, -1)) {
        assert.ok(existsSync(join(ROOT, source)), `${source} exists`);
      }
    }
    assert.match(stages[0]!, /npm ci --ignore-scripts/);
    assert.match(stages[0]!, /npm prune --omit=dev --ignore-scripts/);
    const ignored = readFileSync(join(ROOT, ".dockerignore"), "utf8").split("\n");
    for (const needed of ["src", "bin", "proto", "docker", "package.json", "package-lock.json"]) {
      assert.ok(!ignored.includes(needed), `${needed} reaches the build`);
    }
  });
});

describe("the Kubernetes manifests", () => {
  const manifests = readdirSync(join(ROOT, "deploy", "kubernetes"))
    .filter((name) => name.endsWith(".yaml"))
    .map((name) => ({ name, text: readFileSync(join(ROOT, "deploy", "kubernetes", name), "utf8") }));

  it("name a command the image has on its PATH (`command:` replaces the entrypoint)", () => {
    const linked = [...dockerfile.matchAll(/ln -s (\S+) \/usr\/local\/bin\/(\S+)/g)].map((m) => m[2]);
    for (const { name, text } of manifests) {
      if (!/image: seqserve:/.test(text)) continue;
      for (const match of text.matchAll(/^\s*command: \["([^"]+)"/gm)) {
        assert.ok(linked.includes(match[1]), `${name}: '${match[1]}' is on the image's PATH`);
      }
    }
  });

  it("give the models time to load before liveness counts (no port answers until then)", () => {
    for (const { name, text } of manifests) {
      if (!/livenessProbe:/.test(text)) continue;
      assert.match(text, /startupProbe:/, name);
    }
  });
});

/** Every JavaScript file under `dir`. */
function scripts(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) =>
    entry.isDirectory()
      ? scripts(join(dir, entry.name))
      : entry.name.endsWith(".js")
        ? [join(dir, entry.name)]
        : [],
  );
}

const packageName = (specifier: string): string =>
  specifier.startsWith("@") ? specifier.split("/").slice(0, 2).join("/") : specifier.split("/")[0]!;

describe("the compiled server's dependencies", () => {
  // `npm test` builds dist/ before the tests run.
  it("are exactly package.json's runtime dependencies: each is used, none is missing", () => {
    const manifest = JSON.parse(readFileSync(join(ROOT, "package.json"), "utf8")) as {
      dependencies: Record<string, string>;
      optionalDependencies?: Record<string, string>;
    };
    // An optional dependency is a runtime one the server does without where it cannot install.
    const dependencies = { ...manifest.dependencies, ...manifest.optionalDependencies };
    const used = new Set<string>();
    for (const file of [...scripts(join(ROOT, "dist")), join(ROOT, "bin", "seqserve.js")]) {
      const text = readFileSync(file, "utf8");
      const specifiers = [
        ...text.matchAll(/^(?:import|export) [^;]*? from "([^."][^"]*)";/gm),
        ...text.matchAll(/\bimport(?:\.meta\.resolve)?\("([^."][^"]*)"\)/g),
      ].map((match) => match[1]!);
      for (const specifier of specifiers) {
        if (specifier.startsWith("node:")) continue;
        const name = packageName(specifier);
        assert.ok(name in dependencies, `${file} imports '${specifier}', which is not a runtime dependency`);
        used.add(name);
      }
    }
    assert.deepEqual(
      Object.keys(dependencies).filter((name) => !used.has(name)),
      [],
      "dependencies nothing imports",
    );
  });
});

const BASE_IMAGE =
  process.env.SEQSERVE_TEST_NODE_IMAGE ??
  /^ARG NODE_IMAGE=(\S+)$/m.exec(dockerfile)?.[1] ??
  "node:22-bookworm-slim";

/** The first line of what a failed command said. */
function firstLine(error: unknown): string {
  if ((error as NodeJS.ErrnoException).code === "ENOENT") return "not installed";
  return String((error as { stderr?: Buffer }).stderr ?? (error as Error).message)
    .trim()
    .split("\n")[0]!;
}

/** The first container engine that has (or can pull) the base image and runs containers, or why there is none. */
function findEngine(): { command: string } | { skip: string } {
  const reasons: string[] = [];
  for (const command of ["docker", "podman"]) {
    try {
      execFileSync(command, ["info"], { stdio: "pipe", timeout: 20_000 });
    } catch (error) {
      reasons.push(`${command}: ${firstLine(error)}`);
      continue;
    }
    try {
      execFileSync(command, ["image", "inspect", BASE_IMAGE], { stdio: "pipe", timeout: 20_000 });
    } catch {
      try {
        execFileSync(command, ["pull", BASE_IMAGE], { stdio: "pipe", timeout: 300_000 });
      } catch (error) {
        reasons.push(`${command}: the base image ${BASE_IMAGE} cannot be pulled: ${firstLine(error)}`);
        continue;
      }
    }
    try {
      execFileSync(command, ["run", "--rm", BASE_IMAGE, "node", "--version"], {
        stdio: "pipe",
        timeout: 60_000,
      });
      return { command };
    } catch (error) {
      reasons.push(`${command}: cannot run a container here: ${firstLine(error)}`);
    }
  }
  return { skip: `no container engine here can build and run the image (${reasons.join("; ")})` };
}

const engine = findEngine();

describe("the image, built and run", {
  skip: "skip" in engine ? engine.skip : false,
  timeout: 1_800_000,
}, () => {
  const command = "command" in engine ? engine.command : "docker";
  const tag = `seqserve-test:${process.pid}`;
  const containers: string[] = [];
  const models = join(ROOT, "examples", "models");

  const run = async (args: readonly string[]): Promise<string> =>
    (await exec(command, args, { timeout: 1_500_000, maxBuffer: 64 * 1024 * 1024 })).stdout.trim();
  const start = async (args: readonly string[]): Promise<string> => {
    const id = await run(["run", "--detach", ...args]);
    containers.push(id);
    return id;
  };
  const hostPort = async (id: string, port: number): Promise<number> =>
    Number((await run(["port", id, `${port}/tcp`])).split("\n")[0]!.split(":").pop());
  const until = async (what: string, check: () => Promise<boolean>): Promise<void> => {
    for (let i = 0; i < 240; i++) {
      if (await check().catch(() => false)) return;
      await new Promise((resolve) => setTimeout(resolve, 500));
    }
    assert.fail(`${what}: not within 2 minutes`);
  };

  before(async () => {
    // podman keeps HEALTHCHECK only in Docker's image format.
    const format = command === "podman" ? ["--format", "docker"] : [];
    await run(["build", ...format, "--build-arg", `NODE_IMAGE=${BASE_IMAGE}`, "--tag", tag, ROOT]);
    const bytes = Number(await run(["image", "inspect", "--format", "{{.Size}}", tag]));
    console.log(`image ${tag}: ${(bytes / 1e6).toFixed(0)} MB`);
  });
  after(async () => {
    for (const id of containers) await run(["rm", "--force", id]).catch(() => "");
    await run(["image", "rm", "--force", tag]).catch(() => "");
  });

  it("serves a mounted repository as an unprivileged user, and its HEALTHCHECK reports healthy", async () => {
    const id = await start(["--publish", "127.0.0.1::8000", "--volume", `${models}:/models:ro`, tag]);
    const url = `http://127.0.0.1:${await hostPort(id, 8000)}`;
    await until("ready", async () => (await fetch(`${url}/v2/health/ready`)).status === 200);
    const data = Array.from({ length: 16 }, (_, i) => i);
    const answer = await infer(url, "simple", [
      { name: "INPUT0", datatype: "INT32", shape: [1, 16], data },
      { name: "INPUT1", datatype: "INT32", shape: [1, 16], data },
    ]);
    assert.deepEqual(
      outputData(answer, "OUTPUT0"),
      data.map((v) => 2 * v),
    );
    assert.notEqual(await run(["exec", id, "id", "-u"]), "0");
    await until(
      "healthy",
      async () => (await run(["inspect", "--format", "{{.State.Health.Status}}", id])) === "healthy",
    );
    await run(["stop", "--time", "30", id]);
    assert.equal(await run(["inspect", "--format", "{{.State.ExitCode}}", id]), "0");
  });

  it("starts as SageMaker starts it: `serve`, the models in /opt/ml/model, /ping on 8080", async () => {
    const id = await start([
      "--publish",
      "127.0.0.1::8080",
      "--volume",
      `${models}:/opt/ml/model:ro`,
      tag,
      "serve",
    ]);
    const port = await hostPort(id, 8080);
    await until("/ping", async () => (await fetch(`http://127.0.0.1:${port}/ping`)).status === 200);
    await until(
      "healthy",
      async () => (await run(["inspect", "--format", "{{.State.Health.Status}}", id])) === "healthy",
    );
  });
});
