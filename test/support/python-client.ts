import { spawnSync } from "node:child_process";
import { fileURLToPath } from "node:url";

// The Python that the tests driving official Python clients use: the OVMS guide's
// TensorFlow client and AWS's boto3 session example. SEQSERVE_TEST_PYTHON if set; else a
// virtual environment per client in .bench/python-<client>, made on the first run (about
// a minute) from pip's configured index by tools/python/venv.sh, then reused. Where neither can be had
// (no python3, no index), the reason, so that the test is skipped saying why.

/** The clients the tests drive, each with its import check and its packages. */
const CLIENTS = {
  tensorflow: {
    modules: "import tensorflow, grpc_tools, grpc, numpy",
    packages: ["tensorflow-cpu", "grpcio", "grpcio-tools", "numpy"],
  },
  boto3: { modules: "import boto3", packages: ["boto3"] },
} as const;
type ClientName = keyof typeof CLIENTS;
const VENV_SCRIPT = fileURLToPath(new URL("../../tools/python/venv.sh", import.meta.url));

export type PythonClient = { readonly python: string } | { readonly reason: string };

const found = new Map<ClientName, PythonClient>();

const lastLine = (text: string): string => text.trim().split("\n").pop() ?? "";

function find(name: ClientName): PythonClient {
  const { modules, packages } = CLIENTS[name];
  const given = process.env.SEQSERVE_TEST_PYTHON;
  if (given !== undefined) {
    const probe = spawnSync(given, ["-c", modules], { encoding: "utf8" });
    if (probe.error !== undefined) return { reason: `${given} is not available (${probe.error.message})` };
    if (probe.status !== 0) return { reason: `${given} lacks a client package: ${lastLine(probe.stderr)}` };
    return { python: given };
  }
  // One environment per client, so that a package that cannot be had skips only its tests.
  const venv = fileURLToPath(new URL(`../../.bench/python-${name}`, import.meta.url));
  const made = spawnSync(VENV_SCRIPT, [venv, modules, ...packages], { encoding: "utf8", timeout: 900_000 });
  if (made.error !== undefined || made.status !== 0) {
    const why = made.error?.message ?? lastLine(made.stderr);
    return { reason: `no Python with ${packages.join(", ")} could be set up: ${why}` };
  }
  return { python: lastLine(made.stdout) };
}

/** The Python with the named official client, or why there is none. */
export function pythonClient(name: ClientName): PythonClient {
  let client = found.get(name);
  if (client === undefined) {
    client = find(name);
    found.set(name, client);
  }
  return client;
}
