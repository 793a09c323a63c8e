// The image's HEALTHCHECK: healthy when the server says it is ready, on its KServe HTTP
// endpoint (GET /v2/health/ready), on its SageMaker endpoint (GET /ping) or, for a launch
// that serves gRPC alone (OVMS's `--port` launch), through gRPC's health service. Where
// they listen is read from the server's own command line (the container's first process,
// or SEQSERVE_HEALTH_PID's), as the server reads it. An endpoint served over TLS is asked
// over TLS without checking the server's certificate (it is the server's own, on this
// machine); one that wants a client certificate (mutual TLS) is not asked.
// SEQSERVE_HEALTH_URL names a URL to ask instead.

import { readFileSync, readlinkSync } from "node:fs";
import { get } from "node:https";

/** Where a server on `address` is reached from inside its container. */
function local(address) {
  if (address === undefined || address === "0.0.0.0" || address === "::") return "127.0.0.1";
  return address.includes(":") ? `[${address}]` : address;
}

/**
 * How to ask the server whose process is `pid`, from its command line: HTTP URLs, or a
 * gRPC address; undefined when its command line cannot be read.
 */
async function probesOf(pid) {
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
    // Read with the server's environment (`serve` takes its ports from it), not this one's.
    const env = Object.fromEntries(
      readFileSync(`/proc/${pid}/environ`, "utf8")
        .split("\0")
        .filter((entry) => entry.includes("="))
        .map((entry) => [entry.slice(0, entry.indexOf("=")), entry.slice(entry.indexOf("=") + 1)]),
    );
    const command = parseCommandLine(argv.slice(script + 1), env);
    if (command.kind !== "serve") return undefined;
    const options = command.options;
    const probes = [];
    const httpTls = options.security?.httpTls;
    const grpcTls = options.security?.grpcTls;
    if (httpTls?.mutual !== true) {
      const scheme = httpTls === undefined ? "http" : "https";
      if (options.httpPort !== undefined) {
        const url = `${scheme}://${local(options.httpAddress ?? options.host)}:${options.httpPort}/v2/health/ready`;
        probes.push({ url });
      }
      if (options.sagemakerPort !== undefined) {
        probes.push({ url: `${scheme}://${local(options.host)}:${options.sagemakerPort}/ping` });
      }
    }
    if (options.grpcPort !== undefined && grpcTls?.mutual !== true) {
      const target = `${local(options.grpcAddress ?? options.host)}:${options.grpcPort}`;
      probes.push({ grpc: target, tls: grpcTls !== undefined });
    }
    return probes;
  } catch {
    return undefined;
  }
}

/** Whether an HTTPS URL answers 2xx, the server's own certificate taken as it is. */
function httpsOk(url) {
  return new Promise((resolve) => {
    const request = get(url, { rejectUnauthorized: false, timeout: 2000 }, (response) => {
      response.resume();
      resolve((response.statusCode ?? 0) >= 200 && (response.statusCode ?? 0) < 300);
    });
    request.on("timeout", () => request.destroy());
    request.on("error", () => resolve(false));
  });
}

/** Whether gRPC's health service at `target` says the server is SERVING. */
async function grpcServing(target, tls) {
  const grpc = await import("@grpc/grpc-js");
  const { healthServiceDefinition } = await import(
    new URL("../dist/frontends/grpc/proto-definitions.js", import.meta.url).href
  );
  const Health = grpc.makeGenericClientConstructor(healthServiceDefinition(), "Health");
  const credentials = tls
    ? grpc.credentials.createSsl(null, null, null, { rejectUnauthorized: false })
    : grpc.credentials.createInsecure();
  const client = new Health(target, credentials);
  try {
    return await new Promise((resolve) =>
      client.Check({ service: "" }, { deadline: Date.now() + 2000 }, (error, answer) =>
        resolve(error === null && answer?.status === "SERVING"),
      ),
    );
  } finally {
    client.close();
  }
}

const probes = process.env.SEQSERVE_HEALTH_URL
  ? [{ url: process.env.SEQSERVE_HEALTH_URL }]
  : ((await probesOf(process.env.SEQSERVE_HEALTH_PID || "1")) ?? [
      { url: "http://127.0.0.1:8000/v2/health/ready" },
      { url: `http://127.0.0.1:${process.env.SAGEMAKER_BIND_TO_PORT || 8080}/ping` },
    ]);

let healthy = false;
for (const probe of probes) {
  try {
    if (probe.grpc !== undefined) healthy = await grpcServing(probe.grpc, probe.tls);
    else if (probe.url.startsWith("https:")) healthy = await httpsOk(probe.url);
    else {
      const response = await fetch(probe.url, { signal: AbortSignal.timeout(2000) });
      await response.body?.cancel();
      healthy = response.ok;
    }
  } catch {
    // Nothing listens there, or no answer in time: try the next.
  }
  if (healthy) break;
}
process.exit(healthy ? 0 : 1);
