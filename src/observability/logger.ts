import { type DestinationStream, type Logger, pino } from "pino";

export type { Logger };

/**
 * json: one JSON object per line (what log collectors read); text: a line for people
 * (its fields as JSON at its end);
 * ISO8601: the same with UTC timestamps in ISO 8601, as Triton's --log-format ISO8601.
 */
export type LogFormat = "json" | "text" | "ISO8601";
export const LOG_LEVELS = ["trace", "debug", "info", "warn", "error", "fatal", "silent"] as const;
export type LogLevel = (typeof LOG_LEVELS)[number];

export interface LoggerOptions {
  readonly level: LogLevel;
  readonly format: LogFormat;
  /** Write to this file (created with its folders) instead of standard output. */
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
 * The server's logger. JSON lines are pino's own, written in this thread; text is
 * formatted by pino-pretty in this thread too (no transport thread), loaded only then.
 * Its timestamps can switch to ISO 8601 in UTC and back while it runs: in JSON the `time`
 * field becomes a string, in text the time is printed so.
 */
export async function createLogger(options: LoggerOptions): Promise<Logger> {
  const style: TimestampStyle = { iso: options.format === "ISO8601" };
  const fileDestination = options.file === undefined ? undefined : logFile(options.file);
  const logger = await styledLogger(options, style, fileDestination);
  timestampStyles.set(logger, style);
  if (fileDestination !== undefined) logFiles.set(logger, fileDestination);
  return logger;
}

async function styledLogger(
  options: LoggerOptions,
  style: TimestampStyle,
  fileDestination: ReturnType<typeof logFile> | undefined,
): Promise<Logger> {
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
  const { prettyFactory } = await import("pino-pretty");
  // pino-pretty formats each line (its stream form would pipe to the destination, and a
  // failed write would end that pipe for good); the destination is written here.
  const destination = fileDestination ?? pino.destination({ dest: 1, sync: true });
  const formatter = (isoTime: boolean): ((line: string) => string) =>
    prettyFactory({
      colorize: false,
      translateTime: isoTime ? "UTC:yyyy-mm-dd'T'HH:MM:ss.l'Z'" : "SYS:standard",
      ignore: "pid,hostname",
      // One line per record, its fields as JSON after the message, as Triton writes one:
      // collectors that read lines keep a record whole. An error is a field like any other
      // (its stack escaped in the JSON), and a message's own line breaks are escaped, as
      // Triton escapes its messages.
      singleLine: true,
      errorLikeObjectKeys: [],
      messageFormat: (record: Record<string, unknown>, messageKey: string) =>
        String(record[messageKey] ?? "").replace(/\r?\n/g, "\\n"),
    });
  // One formatter per timestamp style, made when first used; lines go through the current one.
  const formatters = new Map<boolean, (line: string) => string>();
  const prettyLine = (line: string): string => {
    let pretty = formatters.get(style.iso);
    if (pretty === undefined) {
      pretty = formatter(style.iso);
      formatters.set(style.iso, pretty);
    }
    return pretty(line);
  };
  return pino({ level }, { write: (line: string) => destination.write(prettyLine(line)) });
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
