import { type DestinationStream, type Logger, pino } from "pino";
import { isWarningOrError, tritonLogRecord } from "./triton-log-record.ts";

export type { Logger };

/**
 * json: one JSON object per line (seqserve's own); text: Triton's `default` record
 * (`I1128 16:22:20.073000 <pid> seqserve:0] "message" key=value …`); ISO8601: Triton's
 * ISO8601 record (`2024-11-28T16:22:20Z I <pid> seqserve:0] …`).
 */
export type LogFormat = "json" | "text" | "ISO8601";
export const LOG_LEVELS = ["trace", "debug", "info", "warn", "error", "fatal", "silent"] as const;
export type LogLevel = (typeof LOG_LEVELS)[number];

export interface LoggerOptions {
  readonly level: LogLevel;
  readonly format: LogFormat;
  /** Write every record to this file (created with its folders) instead of standard output and error. */
  readonly file?: string | undefined;
}

/** Whether a logger made by createLogger writes ISO 8601 UTC timestamps: read by its writer on each line. */
interface TimestampStyle {
  iso: boolean;
}

const timestampStyles = new WeakMap<Logger, TimestampStyle>();

/** The log file of a logger made by createLogger with one: reopened on request (SIGHUP). */
const logFiles = new WeakMap<Logger, { reopen(): void }>();

/**
 * Opens `logger`'s log file again under its name, as logrotate's rename-and-create
 * rotation needs (its postrotate sends SIGHUP): lines go on in the new file, not the
 * renamed one. False when the logger writes to no file of its own.
 */
export function reopenLogFile(logger: Logger): boolean {
  const file = logFiles.get(logger);
  if (file === undefined) return false;
  file.reopen();
  return true;
}

/**
 * Turns ISO 8601 timestamps on or off (Triton's `log_format` changed while serving);
 * false when `logger` was not made by createLogger (an embedder's, a test's).
 */
export function switchIsoTimestamps(logger: Logger, iso: boolean): boolean {
  const style = timestampStyles.get(logger);
  if (style === undefined) return false;
  style.iso = iso;
  return true;
}

/** Whether `logger` writes ISO 8601 timestamps; undefined when it was not made by createLogger. */
export function isoTimestamps(logger: Logger): boolean | undefined {
  return timestampStyles.get(logger)?.iso;
}

/**
 * The server's logger, pino in every format. JSON lines are pino's own. text (Triton's
 * `default`) and ISO8601 are Triton's records, made from pino's line by the destination
 * (triton-log-record.ts) in this thread: warnings and errors go to standard error and
 * the rest to standard output, as Triton writes them, or all of them to the log file.
 * The timestamps can switch to ISO 8601 in UTC and back while it runs: in JSON the
 * `time` field becomes a string, in a Triton record the format becomes ISO8601.
 */
export async function createLogger(options: LoggerOptions): Promise<Logger> {
  const style: TimestampStyle = { iso: options.format === "ISO8601" };
  const fileDestination = options.file === undefined ? undefined : logFile(options.file);
  const logger = styledLogger(options, style, fileDestination);
  timestampStyles.set(logger, style);
  if (fileDestination !== undefined) logFiles.set(logger, fileDestination);
  return logger;
}

function styledLogger(
  options: LoggerOptions,
  style: TimestampStyle,
  fileDestination: ReturnType<typeof logFile> | undefined,
): Logger {
  const { level, format } = options;
  if (format === "json") {
    const destination = fileDestination ?? pino.destination(1);
    return pino(
      {
        level,
        base: { name: "seqserve" },
        timestamp: () => (style.iso ? `,"time":"${new Date().toISOString()}"` : `,"time":${Date.now()}`),
      },
      destination,
    );
  }
  // Written as each record comes (sync), so that a record on standard error and the next
  // on standard output keep their order for whoever reads both.
  const stdout = fileDestination ?? pino.destination({ dest: 1, sync: true });
  const stderr = fileDestination ?? pino.destination({ dest: 2, sync: true });
  // No base fields: the record's pid is the preamble's, and the host is no part of it.
  return pino(
    { level, base: null },
    {
      write(line: string) {
        const record = JSON.parse(line) as Record<string, unknown>;
        const warningOrError = typeof record.level === "number" && isWarningOrError(record.level);
        (warningOrError ? stderr : stdout).write(tritonLogRecord(record, style.iso));
      },
    },
  );
}

/**
 * The log file, written as each line comes. A write that fails (a full disk, a folder
 * removed) must not end the server, as an unhandled stream error would, with every
 * sequence on it: the lines are dropped while it fails, which is said once on stderr,
 * and again when lines reach the file again.
 */
function logFile(file: string): DestinationStream & { reopen(): void } {
  const destination = pino.destination({ dest: file, mkdir: true, sync: true });
  let dropped = 0;
  destination.on("error", (error: Error) => {
    if (dropped++ === 0)
      process.stderr.write(
        `seqserve: cannot write the log file '${file}' (${error.message}); its lines are dropped\n`,
      );
  });
  destination.on("write", () => {
    if (dropped === 0) return;
    process.stderr.write(
      `seqserve: the log file '${file}' is written again; ${dropped} lines were dropped\n`,
    );
    dropped = 0;
  });
  return destination;
}

/** A logger that writes nothing (tests, embedding). */
export function silentLogger(): Logger {
  return pino({ level: "silent" });
}
