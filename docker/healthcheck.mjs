// The image's HEALTHCHECK: healthy when the server says it is ready, on its KServe HTTP
// endpoint (GET /v2/health/ready) or, for a SageMaker container, on its SageMaker endpoint
// (GET /ping). Where they listen is read from the server's own command line (the
// container's first process, or SEQSERVE_HEALTH_PID's), as the server reads it: a launch
// with other ports, OVMS's flags or `serve` is checked where it serves. An endpoint that
// is off, or served over TLS, is not asked; SEQSERVE_HEALTH_URL names a URL to ask instead.

import { readFileSync, readlinkSync } from "node:fs";

/** Where a server on `address` is reached from inside its container. */
function local(address) {
  if (address === undefined || address === "0.0.0.0" || address === "::") return "127.0.0.1";
  return address.includes(":") ? `[${address}]` : address;
}

/** The health URLs of the server whose process is `pid`, from its command line; undefined when unreadable. */
async function urlsOf(pid) {
  try {
    // node, this image's seqserve.js, then the server's arguments.
    const argv = readFileSync(`/proc/${pid}/cmdline`, "utf8")
      .split("\0")
      .filter((arg) => arg !== "");
    const script = argv.findIndex((arg) => arg.endsWith("seqserve.js") || arg.endsWith("/seqserve"));
    if (script === -1) return undefined;
    // Its relative paths (a model repository) are read from its working folder.
    process.chdir(readlinkSync(`/proc/${pid}/cwd`));
    const { parseCommandLine } = await import(new URL("../dist/cli/options.js", import.meta.url).href);
    const command = parseCommandLine(argv.slice(script + 1), process.env);
    if (command.kind !== "serve") return undefined;
    const options = command.options;
    const urls = [];
    if (options.httpPort !== undefined && options.security?.httpTls === undefined) {
      urls.push(`http://${local(options.httpAddress ?? options.host)}:${options.httpPort}/v2/health/ready`);
    }
    if (options.sagemakerPort !== undefined && options.security?.httpTls === undefined) {
      urls.push(`http://${local(options.host)}:${options.sagemakerPort}/ping`);
    }
    return urls;
  } catch {
    return undefined;
  }
}

const urls = process.env.SEQSERVE_HEALTH_URL
  ? [process.env.SEQSERVE_HEALTH_URL]
  : ((await urlsOf(process.env.SEQSERVE_HEALTH_PID || "1")) ?? [
      "http://127.0.0.1:8000/v2/health/ready",
      `http://127.0.0.1:${process.env.SAGEMAKER_BIND_TO_PORT || 8080}/ping`,
    ]);

let healthy = false;
for (const url of urls) {
  try {
    const response = await fetch(url, { signal: AbortSignal.timeout(2000) });
    await response.body?.cancel();
    if (response.ok) {
      healthy = true;
      break;
    }
  } catch {
    // Nothing listens there, or no answer in time: try the next.
  }
}
process.exit(healthy ? 0 : 1);
