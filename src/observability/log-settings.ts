import { ServerError } from "../core/errors.ts";
import type { LogSettings, LogSettingsControl } from "../core/model.ts";
import { isoTimestamps, type LogFormat, type Logger, switchIsoTimestamps } from "./logger.ts";

// Triton's logging extension over seqserve's logger. Triton switches info, warning and
// error messages on and off one by one; seqserve's logger has one threshold, so the
// settings are turned into the lowest level that keeps what is asked for on, and read
// back as what that level lets through: asking for warnings off while info stays on
// leaves them on, and the answer says so. The format switches the timestamps between
// ISO 8601 and the launch ones, as Triton's does; the file is chosen at start.

const VERBOSE_LEVELS = ["info", "debug", "trace"] as const;

export function logSettingsControl(
  logger: Logger,
  file: string | undefined,
  format: LogFormat,
  launchVerbose = 0,
): LogSettingsControl {
  // The verbose level last asked for: Triton reads back the level set, and every level
  // past 1 is the logger's trace.
  let verboseAsked = launchVerbose;
  const current = (): LogSettings => {
    // Read from the logger itself; a logger the server did not make keeps its launch format.
    const iso = isoTimestamps(logger) ?? format === "ISO8601";
    const value = logger.levelVal;
    const verbose = logger.level === "trace" ? Math.max(2, verboseAsked) : logger.level === "debug" ? 1 : 0;
    return {
      logFile: file ?? "",
      logInfo: value <= logger.levels.values.info!,
      logWarning: value <= logger.levels.values.warn!,
      logError: value <= logger.levels.values.error!,
      logVerboseLevel: verbose,
      logFormat: iso ? "ISO8601" : "default",
    };
  };
  return {
    current,
    update(change) {
      const now = current();
      // As Triton: any file named is refused, the current one included.
      if (change.logFile !== undefined) {
        throw new ServerError("UNSUPPORTED", "log file location can not be updated through network protocol");
      }
      if (change.logFormat !== undefined && change.logFormat !== now.logFormat) {
        if (change.logFormat !== "default" && change.logFormat !== "ISO8601") {
          throw new ServerError("UNAVAILABLE", `invalid argument for --log_format, got: ${change.logFormat}`);
        }
        if (!switchIsoTimestamps(logger, change.logFormat === "ISO8601")) {
          throw new ServerError(
            "UNSUPPORTED",
            `the log format is chosen by whoever made this server's logger: it is '${now.logFormat}' and cannot become '${change.logFormat}' while seqserve runs`,
          );
        }
      }
      const wanted = { ...now, ...change };
      verboseAsked = wanted.logVerboseLevel;
      const verbose = Math.min(wanted.logVerboseLevel, VERBOSE_LEVELS.length - 1);
      logger.level =
        verbose > 0
          ? VERBOSE_LEVELS[verbose]!
          : wanted.logInfo
            ? "info"
            : wanted.logWarning
              ? "warn"
              : wanted.logError
                ? "error"
                : // Fatal messages have no switch of their own in Triton: kept if they were on.
                  logger.level === "fatal"
                  ? "fatal"
                  : "silent";
      return current();
    },
  };
}
