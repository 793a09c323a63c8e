import { SEQSERVE_VERSION, startServer } from "../app/server.ts";
import { reopenLogFile } from "../observability/logger.ts";
import { helpText, parseCommandLine, UsageError } from "./options.ts";
import { runOvmsConfigEdit } from "./ovms-config-edit.ts";

// `seqserve …` and `seqserve serve …`: parse flags (and, for serve, SageMaker's
// environment), start, and stop cleanly on SIGINT/SIGTERM (a second signal stops at once);
// SIGHUP reopens the log file.
// Exit codes: 0 clean stop, 2 bad usage, 1 failed start. `seqserve bench …` runs the
// benchmark instead (loaded only then). OVMS's --add_to_config and --remove_from_config
// edit a config.json and exit: 0, or 1 when the edit is refused.

async function main(): Promise<number> {
  if (process.argv[2] === "bench") {
    const { benchCommand } = await import("../bench/bench-command.ts");
    return benchCommand(process.argv.slice(3));
  }
  let command: ReturnType<typeof parseCommandLine>;
  try {
    command = parseCommandLine(process.argv.slice(2), process.env, { terminal: process.stdout.isTTY });
  } catch (error) {
    if (error instanceof UsageError) {
      process.stderr.write(`seqserve: ${error.message}\nRun 'seqserve --help' for the options.\n`);
      return 2;
    }
    throw error;
  }
  if (command.kind === "help") {
    process.stdout.write(`${helpText(SEQSERVE_VERSION)}\n`);
    return 0;
  }
  if (command.kind === "version") {
    process.stdout.write(`${SEQSERVE_VERSION}\n`);
    return 0;
  }
  if (command.kind === "ovms-config") {
    const { output, code } = runOvmsConfigEdit(command.edit);
    process.stdout.write(output);
    return code;
  }
  let server: Awaited<ReturnType<typeof startServer>>;
  try {
    server = await startServer(command.options);
  } catch (error) {
    process.stderr.write(
      `seqserve: failed to start: ${error instanceof Error ? error.message : String(error)}\n`,
    );
    return 1;
  }
  return await new Promise<number>((resolve) => {
    let signals = 0;
    const onSignal = (signal: NodeJS.Signals) => {
      signals++;
      if (signals > 1) {
        // A second signal does not wait for the exit timeout (Ctrl-C twice).
        server.logger.warn({ event: "signal", signal }, `received ${signal} again: exiting now`);
        process.exit(130);
      }
      server.logger.info({ event: "signal", signal }, `received ${signal}`);
      // 1 when the exit timeout cut work short, as Triton exits then.
      server.stop().then(
        ({ clean }) => resolve(clean ? 0 : 1),
        () => resolve(1),
      );
    };
    process.on("SIGINT", onSignal);
    process.on("SIGTERM", onSignal);
    // With a log file, SIGHUP reopens it (logrotate's postrotate) rather than ending the
    // server; without one it ends the process, as it does Triton's.
    if (command.options.logFile !== undefined) {
      process.on("SIGHUP", () => {
        reopenLogFile(server.logger);
        server.logger.info(
          { event: "signal", signal: "SIGHUP" },
          "received SIGHUP: the log file was reopened",
        );
      });
    }
  });
}

main().then(
  (code) => {
    process.exitCode = code;
    // Stopped: a model load the exit timeout cut short may still hold a worker thread
    // (its initialize() running); the process goes without it, as Triton exits at the
    // exit timeout. Otherwise the process has ended by then, and this never fires.
    setTimeout(() => process.exit(), 1000).unref();
  },
  (error: unknown) => {
    process.stderr.write(
      `seqserve: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`,
    );
    process.exitCode = 1;
  },
);
