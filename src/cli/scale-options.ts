import {
  isRedisLocation,
  parseRedisLocation,
  RedisLocationError,
} from "../state-tiers/redis/redis-location.ts";
import type { FlagSpec } from "./options.ts";
import { UsageError } from "./usage-error.ts";

// Running several replicas of one server: where sequences keep their state.
// `memory` (the default) keeps it in the process; a Redis location writes each step's
// state through to Redis, shared by every replica given the same location, so that any
// replica can continue any sequence (docs/scale-out.md).

export const SCALE_FLAGS: readonly FlagSpec[] = [
  {
    name: "state-store",
    value: "memory|redis://host[:port][/db]|rediss://…|redis+cluster://host:port[,host:port…]",
    default: "memory",
    help:
      "Where sequences keep their state. memory: in this process. A Redis (or Valkey) location: written through to it at " +
      "every step, shared by the replicas given the same location, so that a sequence survives the loss of its replica " +
      "(options ?prefix=NAME&ended_ttl_secs=N).",
  },
];

/** The --state-store value, checked: "memory" or a Redis location. */
export function readStateStore(value: string): string {
  if (value === "memory") return value;
  if (!isRedisLocation(value)) {
    throw new UsageError(
      `--state-store must be 'memory' or a Redis location (redis://, rediss://, redis+cluster://, rediss+cluster://), got '${value}'`,
    );
  }
  try {
    parseRedisLocation(value);
  } catch (error) {
    if (error instanceof RedisLocationError) throw new UsageError(`--state-store: ${error.message}`);
    throw error;
  }
  return value;
}
