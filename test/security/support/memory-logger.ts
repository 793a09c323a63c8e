import { Writable } from "node:stream";
import { pino } from "pino";
import type { Logger } from "../../../src/observability/logger.ts";

// A server logger whose JSON lines land in an array, for tests that check what was logged
// (and what never is: secrets).

export type LogLine = Record<string, unknown>;

export function memoryLogger(lines: LogLine[], level: "debug" | "info" = "info"): Logger {
  const sink = new Writable({
    write(chunk: Buffer, _encoding, done) {
      for (const line of chunk.toString().split("\n")) if (line !== "") lines.push(JSON.parse(line));
      done();
    },
  });
  return pino({ level }, sink);
}
