import { type Logger, pino } from "pino";

export type { Logger };

export type LogFormat = "json" | "text";
export const LOG_LEVELS = ["trace", "debug", "info", "warn", "error", "fatal", "silent"] as const;
export type LogLevel = (typeof LOG_LEVELS)[number];

export interface LoggerOptions {
  readonly level: LogLevel;
  readonly format: LogFormat;
}

/** The server's logger: JSON lines for machines, or pino-pretty text for people. */
export function createLogger(options: LoggerOptions): Logger {
  if (options.format === "text") {
    return pino({
      level: options.level,
      transport: {
        target: "pino-pretty",
        options: { colorize: false, translateTime: "SYS:standard", ignore: "pid,hostname" },
      },
    });
  }
  return pino({ level: options.level, base: { name: "seqserve" } });
}

/** A logger that writes nothing (tests, embedding). */
export function silentLogger(): Logger {
  return pino({ level: "silent" });
}
