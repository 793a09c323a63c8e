// A log record written as Triton writes one (triton-inference-server/common, logging.cc),
// so that what reads Triton's logs (Fluent Bit or Loki regexes, `grep '^[IWE][0-9]{4}'`,
// Triton's own L0_logging checks) reads seqserve's:
//
//   default:  I1128 16:22:20.073000 4242 seqserve:0] "loaded model 'm'" model=m version=1
//   ISO8601:  2024-11-28T16:22:20Z I 4242 seqserve:0] "loaded model 'm'" model=m version=1
//
// The level letter is Triton's: I for info and the verbose levels (Triton's verbose
// records are I records), W for warnings, E for errors and fatal ones. Times are UTC, as
// Triton's; the default format's microseconds are the millisecond's (JavaScript's clock),
// as Triton's Windows build writes them. Where Triton names its C++ source file and line,
// seqserve has none: every record names the logger, `seqserve`, at line 0, which keeps
// the field's pattern (`[\w.]+:\d+`) and never changes from one release to the next.
// The message is escaped as a JSON string, as Triton escapes its messages by default
// (no line break nor control code reaches the log), and the record's fields
// follow it as key=value pairs (logfmt): a value that is not one plain word is quoted as
// a JSON string, an object (an error with its stack) is written as compact JSON.

/** pino's numeric levels from which a record is a warning, an error. */
const WARN = 40;
const ERROR = 50;

/** The "<file>:<line>" of every record. */
const SOURCE = "seqserve:0";

/** Fields of pino's record that the preamble and the message carry. */
const PREAMBLE_FIELDS = new Set(["level", "time", "msg"]);

/** Whether a record is a warning or an error: Triton writes those to standard error. */
export function isWarningOrError(level: number): boolean {
  return level >= WARN;
}

/** Triton's level letter for pino's numeric level. */
function levelLetter(level: number): "I" | "W" | "E" {
  return level >= ERROR ? "E" : level >= WARN ? "W" : "I";
}

const two = (n: number): string => String(n).padStart(2, "0");

/** `MMDD HH:MM:SS.uuuuuu` (default) or `YYYY-MM-DDTHH:MM:SSZ` (ISO8601), in UTC. */
function timestamp(time: Date, iso: boolean): string {
  const clock = `${two(time.getUTCHours())}:${two(time.getUTCMinutes())}:${two(time.getUTCSeconds())}`;
  const month = two(time.getUTCMonth() + 1);
  const day = two(time.getUTCDate());
  if (iso) return `${time.getUTCFullYear()}-${month}-${day}T${clock}Z`;
  return `${month}${day} ${clock}.${String(time.getUTCMilliseconds() * 1000).padStart(6, "0")}`;
}

/** A key or a value written bare: no space, quote, `=`, backslash nor control character. */
const PLAIN = /^[^\s"=\\\p{Cc}]+$/u;

/**
 * JSON text, with DEL and the C1 controls escaped too (JSON escapes only those below
 * U+0020): a terminal reading the log is sent no control code at all.
 */
function json(value: unknown): string {
  return JSON.stringify(value).replace(
    /[\u007f-\u009f]/g,
    (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`,
  );
}

function fieldText(value: unknown): string {
  if (typeof value === "string") return PLAIN.test(value) ? value : json(value);
  if (value !== null && typeof value === "object") return json(value);
  return String(value);
}

/**
 * The Triton record, with its line break, for one of pino's JSON lines: `record` is that
 * line parsed (`level`, `time` in epoch milliseconds, `msg`, then its fields).
 */
export function tritonLogRecord(record: Record<string, unknown>, iso: boolean, pid = process.pid): string {
  const level = typeof record.level === "number" ? record.level : 30;
  const time = new Date(typeof record.time === "number" ? record.time : Date.now());
  const when = timestamp(time, iso);
  const preamble = iso
    ? `${when} ${levelLetter(level)} ${pid} ${SOURCE}] `
    : `${levelLetter(level)}${when} ${pid} ${SOURCE}] `;
  let line = preamble + json(typeof record.msg === "string" ? record.msg : "");
  for (const [key, value] of Object.entries(record)) {
    if (PREAMBLE_FIELDS.has(key) || value === undefined) continue;
    line += ` ${PLAIN.test(key) ? key : json(key)}=${fieldText(value)}`;
  }
  return `${line}\n`;
}
