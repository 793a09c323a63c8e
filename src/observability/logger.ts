import { type DestinationStream, type Logger, pino } from "pino";

export type { Logger };

/**
 * json: one JSON object per line (what log collectors read); text: a line for people;
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

/**
 * The server's logger. JSON lines are pino's own, written in this thread; text is
 * formatted by pino-pretty as a plain stream (no transport thread), loaded only then.
 */
export async function createLogger(options: LoggerOptions): Promise<Logger> {
  const { level, format, file } = options;
  if (format === "json") {
    const destination =
      file === undefined ? pino.destination(1) : pino.destination({ dest: file, mkdir: true, sync: true });
    return pino({ level, base: { name: "seqserve" } }, destination);
  }
  const { default: pretty } = await import("pino-pretty");
  const stream: DestinationStream = pretty({
    colorize: false,
    translateTime: format === "ISO8601" ? "UTC:yyyy-mm-dd'T'HH:MM:ss.l'Z'" : "SYS:standard",
    ignore: "pid,hostname",
    sync: true,
    ...(file === undefined ? {} : { destination: file, mkdir: true }),
  });
  return pino({ level }, stream);
}

/** A logger that writes nothing (tests, embedding). */
export function silentLogger(): Logger {
  return pino({ level: "silent" });
}
