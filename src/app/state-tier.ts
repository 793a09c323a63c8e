import type { SequenceTier } from "../core/sequence/sequence-tier.ts";
import type { Logger } from "../observability/logger.ts";
import { parseRedisLocation } from "../state-tiers/redis/redis-location.ts";

// --state-store: memory (no tier: each sequence lives in this process) or a Redis
// location, connected before any model loads so that a wrong address stops the start
// with a message that names it. The Redis client is loaded only then: a server without a
// tier does not carry it.

export async function openSequenceTier(
  stateStore: string | undefined,
  logger: Logger,
): Promise<SequenceTier | undefined> {
  if (stateStore === undefined || stateStore === "memory") return undefined;
  const location = parseRedisLocation(stateStore);
  const { RedisSequenceTier } = await import("../state-tiers/redis/redis-sequence-tier.ts");
  let lastError = "";
  const tier = await RedisSequenceTier.connect(location, (error) => {
    // ioredis repeats a connection error at each retry: log each new one once.
    if (error.message === lastError) return;
    lastError = error.message;
    logger.warn(
      { event: "state_store_error", state_store: location.display },
      `state store at ${location.display}: ${error.message}`,
    );
  });
  tier.onDataLost((atMs) =>
    logger.error(
      { event: "state_store_lost", state_store: location.display, at: new Date(atMs).toISOString() },
      `the state store at ${location.display} lost its data (it restarted without persistence): sequences it held are lost; each replica names those it held`,
    ),
  );
  logger.info(
    { event: "state_store", state_store: location.display },
    `sequence state is written through to ${location.display}`,
  );
  return tier;
}
