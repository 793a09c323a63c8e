import type { SequenceTier } from "../core/sequence/sequence-tier.ts";
import type { Logger } from "../observability/logger.ts";
import { StateStoreLog } from "../observability/state-store-log.ts";
import { parseRedisLocation } from "../state-tiers/redis/redis-location.ts";
import { allOf, type StateStoreObserver } from "../state-tiers/state-store-observer.ts";

// --state-store: memory (no tier: each sequence lives in this process) or a Redis
// location, connected before any model loads so that a wrong address stops the start
// with a message that names it. The Redis client is loaded only then: a server without a
// tier does not carry it. The store's failures are logged (state-store-log.ts) and, with
// metrics, counted (the observers).

export async function openSequenceTier(
  stateStore: string | undefined,
  logger: Logger,
  observers: readonly StateStoreObserver[] = [],
): Promise<SequenceTier | undefined> {
  if (stateStore === undefined || stateStore === "memory") return undefined;
  const location = parseRedisLocation(stateStore);
  const { RedisSequenceTier } = await import("../state-tiers/redis/redis-sequence-tier.ts");
  const tier = await RedisSequenceTier.connect(
    location,
    allOf([new StateStoreLog(logger, location.display), ...observers]),
  );
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
