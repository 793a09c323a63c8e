import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, test } from "node:test";
import { parseCommandLine } from "../../src/cli/options.ts";
import { SECURITY_FLAGS } from "../../src/cli/security-options.ts";
import { DEFAULT_LIMITS } from "../../src/config/security-options.ts";
import { LIMITS } from "../../src/core/refusals.ts";

// The security flags: every limit with its default, API keys from files and the
// environment (checked at start, never from the command line itself), Triton's
// restricted-API syntax with its errors; and every flag and refusal metric documented.

const dir = mkdtempSync(join(tmpdir(), "seqserve-flags-"));
after(() => rmSync(dir, { recursive: true, force: true }));
const base = ["--model-repository", dir];
const serve = (args: string[], env: Record<string, string> = {}) => {
  const command = parseCommandLine([...base, ...args], env);
  if (command.kind !== "serve") throw new Error("not a serve command");
  return command.options.security!;
};

test("limits have their defaults, and each flag sets its own", () => {
  assert.deepEqual(serve([]).limits, DEFAULT_LIMITS);
  const limits = serve(["--max-instances-per-model", "4", "--grpc-max-decompressed-bytes=1048576"]).limits;
  assert.equal(limits.maxInstancesPerModel, 4);
  assert.equal(limits.grpcMaxDecompressedBytes, 1048576);
  assert.throws(
    () => serve(["--http-request-timeout-secs", "0"]),
    /--http-request-timeout-secs must be at least 1/,
  );
});

test("API keys from a file and from the environment; bad entries stop the server with the reason", () => {
  const file = join(dir, "keys");
  writeFileSync(
    file,
    "# name  apis  key\ntenant-a inference,metadata aaaaaaaaaaaaaaaaaaaa\nops * oooooooooooooooooooo\n",
  );
  const access = serve(["--api-keys-file", file, "--api-keys-env", "KEYS"], {
    KEYS: "tenant-b inference bbbbbbbbbbbbbbbbbbbb",
  }).access;
  assert.deepEqual(
    access.apiKeys.map((k) => [k.name, k.groups.length]),
    [
      ["tenant-a", 2],
      ["ops", 11],
      ["tenant-b", 1],
    ],
  );
  assert.deepEqual(access.openGroups, ["health"]);
  writeFileSync(file, "short inference tooshort\n");
  assert.throws(() => serve(["--api-keys-file", file]), /the key of 'short' is shorter than 16 characters/);
  writeFileSync(file, "x inferense aaaaaaaaaaaaaaaaaaaa\n");
  assert.throws(() => serve(["--api-keys-file", file]), /unknown API 'inferense'/);
  assert.throws(() => serve(["--api-keys-env", "NOPE"]), /NOPE is not set/);
  writeFileSync(file, "a inference aaaaaaaaaaaaaaaaaaaa\nb metadata aaaaaaaaaaaaaaaaaaaa\n");
  assert.throws(() => serve(["--api-keys-file", file]), /reuses another entry's key/);
});

test("Triton's restricted-API syntax and its errors", () => {
  const access = serve([
    "--http-restricted-api",
    "model-repository,statistics:Admin-Key=v=1",
    "--grpc-restricted-protocol",
    "health:k=v",
  ]).access;
  assert.deepEqual(access.httpRestrictions["model-repository"], { header: "admin-key", value: "v=1" });
  assert.deepEqual(access.grpcRestrictions.health, { header: "triton-grpc-protocol-k", value: "v" });
  assert.throws(() => serve(["--http-restricted-api", "nonsense:k=v"]), /unknown restricted API 'nonsense'/);
  assert.throws(
    () => serve(["--http-restricted-api", "health:a=b", "--http-restricted-api", "health:c=d"]),
    /restricted API 'health' can not be specified in multiple config groups/,
  );
  assert.throws(() => serve(["--grpc-restricted-protocol", "health"]), /expects <apis>:<key>=<value>/);
});

test("CORS origins are checked", () => {
  assert.deepEqual(serve(["--cors-allow-origin", "https://app.example/"]).corsAllowOrigins, [
    "https://app.example",
  ]);
  assert.throws(() => serve(["--cors-allow-origin", "https://app.example/path"]), /expects an origin/);
});

test("every security flag and every refusal the metrics count is documented in the README", () => {
  const readme = readFileSync(new URL("../../README.md", import.meta.url), "utf8");
  for (const flag of SECURITY_FLAGS)
    assert.ok(readme.includes(`--${flag.name}`), `--${flag.name} is not in the README`);
  for (const limit of LIMITS)
    assert.ok(readme.includes(`\`${limit}\``), `refusal '${limit}' is not in the README`);
});
