import { spawnSync } from "node:child_process";
import { fileURLToPath } from "node:url";

// The Python that the tests driving official Python clients use: the OVMS guide's
// TensorFlow client and AWS's boto3 session example. SEQSERVE_TEST_PYTHON if set; else a
// virtual environment in .bench/python-client made on the first run (about a minute) from
// pip's configured index by tools/python/venv.sh, then reused. Where neither can be had
// (no python3, no index), the reason, so that the test is skipped saying why.

const MODULES = "import tensorflow, grpc_tools, grpc, boto3, numpy";
const PACKAGES = ["tensorflow-cpu", "grpcio", "grpcio-tools", "boto3", "numpy"];
const VENV = fileURLToPath(new URL("../../.bench/python-client", import.meta.url));
const VENV_SCRIPT = fileURLToPath(new URL("../../tools/python/venv.sh", import.meta.url));

export type PythonClient = { readonly python: string } | { readonly reason: string };

let found: PythonClient | undefined;

const lastLine = (text: string): string => text.trim().split("\n").pop() ?? "";

function find(): PythonClient {
  const given = process.env.SEQSERVE_TEST_PYTHON;
  if (given !== undefined) {
    const probe = spawnSync(given, ["-c", MODULES], { encoding: "utf8" });
    if (probe.error !== undefined) return { reason: `${given} is not available (${probe.error.message})` };
    if (probe.status !== 0) return { reason: `${given} lacks a client package: ${lastLine(probe.stderr)}` };
    return { python: given };
  }
  const made = spawnSync(VENV_SCRIPT, [VENV, MODULES, ...PACKAGES], { encoding: "utf8", timeout: 900_000 });
  if (made.error !== undefined || made.status !== 0) {
    const why = made.error?.message ?? lastLine(made.stderr);
    return { reason: `no Python with ${PACKAGES.join(", ")} could be set up: ${why}` };
  }
  return { python: lastLine(made.stdout) };
}

/** The Python with the official clients, or why there is none. */
export function pythonClient(): PythonClient {
  found ??= find();
  return found;
}
