import { randomUUID } from "node:crypto";
import { Cluster, Redis, type RedisOptions } from "ioredis";
import type { SequenceId } from "../../core/infer.ts";
import {
  type ModelTier,
  type SequenceTier,
  TierAnswerLost,
  type TierExpiry,
  type TierMove,
  type TierMoveResult,
  type TierRecord,
  type TierRecordElsewhere,
  type TierStamp,
  type TierWrite,
  type TierWriteResult,
} from "../../core/sequence/sequence-tier.ts";
import { untilDeadline } from "../../core/timer-delay.ts";
import type {
  StateStoreFailureKind,
  StateStoreObserver,
  StateStoreOperation,
} from "../state-store-observer.ts";
import { FENCE_MOVED_RECORD_LUA, MOVE_RECORD_LUA } from "./move-script.ts";
import {
  END_MODES,
  endScripts,
  RENEW_RECORD_LUA,
  WRITE_RECORD_LUA,
  WRITE_RECORDS_LUA,
} from "./record-script.ts";
import type { RedisLocation } from "./redis-location.ts";

// The sequence tier on Redis (or Valkey, or a Redis Cluster): one hash per sequence id of
// a model version, written by one Lua script (record-script.ts) that fences on version
// and life. Writes issued in the same turn of the event loop go to Redis together
// (ioredis's auto-pipelining, per node in a cluster), so a batch's rows cost one round
// trip. Commands are never sent twice: a write whose answer was lost with the connection
// fails, and the core reads the record again, rather than risk a step applied twice.
//
// Keys: <prefix>:seq:<model>:<version>:<u|s>:<id> (model and id URI-encoded), the id
// counter <prefix>:ids, <prefix>:marker, a random value whose disappearance after a
// reconnect shows that Redis lost its data (restarted without persistence), and
// <prefix>:versions:<model>, a hash of the versions of the model that replicas have served
// (each with its state signature), where a replica serving one version looks for a
// sequence's record in the others (a rolling upgrade). A replica registers the versions it
// serves at their load and again at every (re)connection, before anything it queued
// meanwhile is sent, so a version is registered before its first record is written.

/**
 * The id counter never goes back, not even when Redis loses it: a counter that started
 * over at 0 would hand out again ids that replicas gave out before the loss, and a client
 * still holding one of them would step another client's sequence. A missing counter is
 * therefore seeded (in the same script run as the INCRBY, so no loss can fall between
 * them) from a base that no earlier reservation can have reached: the reserving replica's
 * clock in milliseconds times 2^20, or, when later, the end of the last block this
 * replica reserved. The clock is what every replica has, including one started after the
 * loss, which knows nothing of the old counter; 2^20 ids a millisecond is more than
 * replicas can give out, so a counter seeded earlier has not reached the new base unless
 * the clocks that seeded them differ by more than the time between the two seeds.
 * Counter values stay below 2^63 (INCRBY's limit) until the year 2248, and an assigned id
 * (2^62 plus the counter value) stays a uint64. The answer is read back with GET: Lua
 * numbers are doubles, which would round a counter this large.
 */
const RESERVE_IDS_LUA = `
redis.call('SET', KEYS[1], ARGV[2], 'NX')
redis.call('INCRBY', KEYS[1], ARGV[1])
return redis.call('GET', KEYS[1])
`;

/** The counter's base for ids reserved now: milliseconds since the epoch times 2^20. */
const clockBase = (): bigint => BigInt(Date.now()) << 20n;

type Client = Redis | Cluster;

type Argument = string | Buffer | number;
type WriteReply = [number, unknown];

interface ScriptCommands {
  reserveIds(key: string, count: number, seed: string): Promise<string>;
  renewRecord(key: string, version: number, life: string, kind: string, value: number): Promise<number>;
  writeRecordBuffer(key: string, ...args: Argument[]): Promise<WriteReply>;
  writeRecordsBuffer(keyCount: number, ...keysThenArgs: Argument[]): Promise<WriteReply[]>;
  endRecordBuffer(key: string, ...args: Argument[]): Promise<WriteReply>;
  endRecordsBuffer(keyCount: number, ...keysThenArgs: Argument[]): Promise<WriteReply[]>;
  moveRecordBuffer(from: string, to: string, ...args: Argument[]): Promise<[number, unknown, unknown?]>;
  fenceMovedRecordBuffer(from: string, ...args: Argument[]): Promise<number | Buffer[]>;
}

const encode = (text: string): string => encodeURIComponent(text);

function versionsKey(prefix: string, model: string): string {
  return `${prefix}:versions:${encode(model)}`;
}

function recordKey(prefix: string, model: string, version: string, id: SequenceId): string {
  const idPart = typeof id === "bigint" ? `u:${id}` : `s:${encode(id)}`;
  return `${prefix}:seq:${encode(model)}:${encode(version)}:${idPart}`;
}

/** An HGETALL answer (a flat list, or an object of Buffers) as a record. */
function toRecord(fields: Record<string, Buffer> | Buffer[] | null | undefined): TierRecord | undefined {
  let map: Record<string, Buffer>;
  if (Array.isArray(fields)) {
    map = {};
    for (let i = 0; i + 1 < fields.length; i += 2) map[fields[i]!.toString()] = fields[i + 1]!;
  } else map = fields ?? {};
  const life = map.life;
  if (life === undefined || map.v === undefined) return undefined;
  return {
    version: Number(map.v.toString()),
    life: life.toString(),
    body: map.body ?? Buffer.alloc(0),
    ended: map.ended?.toString(),
    writtenAtMs: Number(map.at?.toString() ?? "0"),
    movedTo: map.moved_to?.toString(),
  };
}

/**
 * How long a disconnect waits for Redis to close its end of a connection before the
 * socket is dropped (ioredis's disconnectTimeout, 2 s by default). A Redis that answers
 * closes at once; one that does not (a frozen process, a host whose packets are dropped)
 * would hold the process's exit that long after its stop.
 */
const DISCONNECT_TIMEOUT_MS = 250;

/** How long a command may go unanswered before it fails. */
const COMMAND_TIMEOUT_MS = 10_000;

/**
 * A failed command, in words a client of the server can act on (they reach clients in 503
 * answers, "… failed (<this>); retry the request"): ioredis's own texts name options of a
 * library the client cannot set, and Redis's name the script that failed by its SHA and
 * line. The original error is its cause, for the log. A command that timed out, or whose
 * connection was closed under it, was sent and may run yet (ioredis does not take back a
 * command it wrote, and Redis runs what it reads, however late): its outcome is unknown,
 * a TierAnswerLost, which the core tells its clients apart from a refusal. So is one that
 * timed out before it was ever sent (queued while a connection came up, to a Redis that
 * took the connection and did not answer its handshake): ioredis sends what it queued
 * once the connection is ready, timed out or not, and its queue is private, so a command
 * cannot be withdrawn, nor told apart from one sent.
 */
function storeFailure(error: unknown): { readonly kind: StateStoreFailureKind; readonly error: Error } {
  const message = error instanceof Error ? error.message : String(error);
  const said = (kind: StateStoreFailureKind, text: string) => ({
    kind,
    error:
      kind === "timeout" || kind === "closed"
        ? new TierAnswerLost(text, { cause: error })
        : new Error(text, { cause: error }),
  });
  if (/^OOM /.test(message))
    return said(
      "full",
      "the state store is full (maxmemory): it takes no new state until sequences end or its maxmemory is raised",
    );
  if (/script: [0-9a-f]{40}/i.test(message))
    return said("refused", `Redis refused it: ${message.replace(/\.?\s*script: [0-9a-f]{40}.*$/is, "")}`);
  if (/max retries per request/i.test(message))
    return said("unreachable", "it could not be reached: the connection was lost and reconnecting failed");
  if (/command timed out/i.test(message))
    return said("timeout", `it did not answer within ${COMMAND_TIMEOUT_MS / 1000} s`);
  if (/connection is closed/i.test(message)) return said("closed", "the connection to it is closed");
  return { kind: "refused", error: error instanceof Error ? error : new Error(message) };
}

/** Tells no one. */
const UNOBSERVED: StateStoreObserver = {
  answered: () => {},
  failed: () => {},
  connectionFailed: () => {},
  connected: () => {},
};

export class RedisSequenceTier implements SequenceTier {
  readonly location: string;
  readonly #location: RedisLocation;
  readonly #client: Client;
  readonly #observer: StateStoreObserver;
  readonly #writes = new Set<Promise<unknown>>();
  readonly #lostListeners = new Set<(atMs: number) => void>();
  /** The key of an id's record, for each model version's records handed out (a move names the records it comes from). */
  readonly #keys = new WeakMap<ModelTier, (id: SequenceId) => string>();
  #marker: string | undefined;
  #dataLostAtMs: number | undefined;
  /** The versions this replica has served, by model, with their state signatures: registered at every connection. */
  readonly #served = new Map<string, Map<string, string>>();
  /**
   * The versions this replica serves now, by model, with how many loads of each serve it (a
   * reload of a version opens the new load before the old one goes): findElsewhere never
   * takes a sequence over from one of them.
   */
  readonly #servingHere = new Map<string, Map<string, number>>();
  /** The end of the last block of ids this replica reserved: a missing counter starts no lower. */
  #reservedUpTo = 0n;
  #closed = false;

  private constructor(location: RedisLocation, client: Client, observer: StateStoreObserver) {
    this.#location = location;
    this.#observer = observer;
    this.location = location.display;
    this.#client = client;
    client.defineCommand("writeRecord", { numberOfKeys: 1, lua: WRITE_RECORD_LUA });
    client.defineCommand("writeRecords", { lua: WRITE_RECORDS_LUA });
    this.#defineEndScripts(true);
    client.defineCommand("reserveIds", { numberOfKeys: 1, lua: RESERVE_IDS_LUA });
    client.defineCommand("renewRecord", { numberOfKeys: 1, lua: RENEW_RECORD_LUA });
    client.defineCommand("moveRecord", { numberOfKeys: 2, lua: MOVE_RECORD_LUA });
    client.defineCommand("fenceMovedRecord", { numberOfKeys: 1, lua: FENCE_MOVED_RECORD_LUA });
    // Every (re)connection checks that Redis still has its data.
    client.on("ready", () => {
      this.#observer.connected();
      // Before the commands queued while disconnected (ioredis sends them after "ready"):
      // the versions go back into a store that lost them with its data.
      for (const [model, versions] of this.#served) {
        for (const [version, signature] of versions) this.#register(model, version, signature);
      }
      void this.#checkMarker().catch(() => {});
    });
  }

  /**
   * The scripts that write ends, with Redis 7's flag that lets them run on a full Redis
   * (record-script.ts) when `scriptFlags`; defined again without it once the server is
   * known to be older.
   */
  #defineEndScripts(scriptFlags: boolean): void {
    const ends = endScripts(scriptFlags);
    this.#client.defineCommand("endRecord", { numberOfKeys: 1, lua: ends.one });
    this.#client.defineCommand("endRecords", { lua: ends.several });
  }

  /** Script flags (an end's allow-oom) need Redis 7 (Valkey reports a Redis version too). */
  async #checkScriptFlags(): Promise<void> {
    const info = await this.#client.info("server");
    const major = Number(/^redis_version:(\d+)/m.exec(info)?.[1] ?? "7");
    if (major < 7) this.#defineEndScripts(false);
  }

  /** Connects and checks the server answers; rejects with a message naming the location. */
  static async connect(
    location: RedisLocation,
    observer: StateStoreObserver = UNOBSERVED,
  ): Promise<RedisSequenceTier> {
    const options: RedisOptions = {
      lazyConnect: true,
      enableAutoPipelining: true,
      autoResendUnfulfilledCommands: false,
      maxRetriesPerRequest: 3,
      connectTimeout: 5000,
      commandTimeout: COMMAND_TIMEOUT_MS,
      disconnectTimeout: DISCONNECT_TIMEOUT_MS,
      retryStrategy: (attempt) => Math.min(attempt * 100, 1000),
      ...(location.username === undefined ? {} : { username: location.username }),
      ...(location.password === undefined ? {} : { password: location.password }),
      ...(location.tls ? { tls: {} } : {}),
    };
    const client: Client = location.cluster
      ? new Cluster(
          location.nodes.map((n) => ({ host: n.host, port: n.port })),
          { redisOptions: options, enableAutoPipelining: true, lazyConnect: true },
        )
      : new Redis({
          ...options,
          host: location.nodes[0]!.host,
          port: location.nodes[0]!.port,
          db: location.db,
        });
    client.on("error", (error: Error) => observer.connectionFailed(error.message));
    const tier = new RedisSequenceTier(location, client, observer);
    try {
      await client.connect();
      await tier.#checkMarker();
      await tier.#checkScriptFlags();
    } catch (error) {
      client.disconnect();
      throw new Error(
        `the state store at ${location.display} cannot be reached: ${(error as Error).message}`,
      );
    }
    return tier;
  }

  get dataLostAtMs(): number | undefined {
    return this.#dataLostAtMs;
  }

  onDataLost(listener: (atMs: number) => void): () => void {
    this.#lostListeners.add(listener);
    return () => this.#lostListeners.delete(listener);
  }

  async #checkMarker(): Promise<void> {
    const key = `${this.#location.prefix}:marker`;
    let value = await this.#client.get(key);
    const known = this.#marker;
    if (value === null) {
      await this.#client.set(key, randomUUID(), "NX");
      value = await this.#client.get(key);
    }
    this.#marker = value ?? undefined;
    if (known !== undefined && value !== known) {
      const atMs = Date.now();
      this.#dataLostAtMs = atMs;
      for (const listener of this.#lostListeners) listener(atMs);
    }
  }

  async reserveIds(count: number): Promise<bigint> {
    const base = clockBase();
    const seed = base > this.#reservedUpTo ? base : this.#reservedUpTo;
    const client = this.#client as unknown as ScriptCommands;
    const last = BigInt(
      await this.#observed("reserve_ids", () =>
        client.reserveIds(`${this.#location.prefix}:ids`, count, seed.toString()),
      ),
    );
    if (last > this.#reservedUpTo) this.#reservedUpTo = last;
    return last - BigInt(count);
  }

  /** Best effort: a failed registration is made again at the next connection. */
  #register(model: string, version: string, signature: string): void {
    this.#client.hset(versionsKey(this.#location.prefix, model), version, signature).catch(() => {});
  }

  forModel(model: string, version: string, stateSignature?: string): ModelTier {
    /** Undefined until the load serves (startServing), and again once it stops. */
    let serving: boolean | undefined;
    const records: ModelTier = {
      tier: this,
      records: `${model}:${version}`,
      version,
      read: (id) =>
        this.#observed("read", () => this.#read(recordKey(this.#location.prefix, model, version, id))),
      findElsewhere: (id) => this.#observed("read", () => this.#findElsewhere(model, version, id)),
      stamp: (id) =>
        this.#observed("read", () => this.#stamp(recordKey(this.#location.prefix, model, version, id))),
      write: (writes) => this.#track(this.#write(model, version, writes)),
      renew: (id, expect, expiry) =>
        this.#track(
          this.#observed("renew", () =>
            this.#renew(recordKey(this.#location.prefix, model, version, id), expect, expiry),
          ),
        ),
      moveFrom: (from, move) => {
        const fromKey = this.#keys.get(from);
        if (fromKey === undefined) throw new Error(`records ${from.records} are not in ${this.location}`);
        return this.#track(this.#observed("move", () => this.#move(fromKey(move.id), model, version, move)));
      },
      startServing: () => {
        if (stateSignature === undefined || serving !== undefined) return;
        serving = true;
        let versions = this.#served.get(model);
        if (versions === undefined) this.#served.set(model, (versions = new Map()));
        versions.set(version, stateSignature);
        this.#register(model, version, stateSignature);
        this.#countServing(model, version, 1);
      },
      stopServing: () => {
        if (serving !== true) return;
        serving = false;
        this.#countServing(model, version, -1);
      },
    };
    this.#keys.set(records, (id) => recordKey(this.#location.prefix, model, version, id));
    return records;
  }

  /** See move-script.ts: one script run on one Redis; on a Cluster, the fence, then the write. */
  async #move(fromKey: string, model: string, version: string, move: TierMove): Promise<TierMoveResult> {
    const toKey = recordKey(this.#location.prefix, model, version, move.id);
    const client = this.#client as unknown as ScriptCommands;
    const expiry = move.expiry;
    const args: Argument[] = [
      move.expect.version,
      move.expect.life,
      Buffer.from(move.body.buffer, move.body.byteOffset, move.body.byteLength),
      Buffer.from(move.fencedBody.buffer, move.fencedBody.byteOffset, move.fencedBody.byteLength),
      move.endReason,
      version,
      expiry.kind,
      expiry.kind === "idle" ? expiry.ms : expiry.kind === "at" ? expiry.epochMs : 0,
      this.#location.endedTtlSecs * 1000,
      Date.now(),
    ];
    if (!this.#location.cluster) {
      const [moved, detail, record] = await client.moveRecordBuffer(fromKey, toKey, ...args);
      if (Number(moved) === 1) return { kind: "moved", version: Number(detail) };
      const current = toRecord(record as Buffer[]);
      if (String(detail) === "occupied" && current !== undefined) return { kind: "occupied", current };
      return { kind: "changed", current };
    }
    const occupied = await this.#read(toKey);
    if (occupied !== undefined && occupied.ended === undefined)
      return { kind: "occupied", current: occupied };
    const fenced = await client.fenceMovedRecordBuffer(fromKey, ...args);
    if (Array.isArray(fenced)) return { kind: "changed", current: toRecord(fenced) };
    const [written] = await this.#write(model, version, [
      { id: move.id, mode: "new", life: move.expect.life, body: move.body, expiry },
    ]);
    if (written?.kind === "written") return { kind: "moved", version: written.version };
    throw new Error("the moved record could not be written");
  }

  #countServing(model: string, version: string, change: 1 | -1): void {
    let versions = this.#servingHere.get(model);
    if (versions === undefined) this.#servingHere.set(model, (versions = new Map()));
    const loads = (versions.get(version) ?? 0) + change;
    if (loads > 0) versions.set(version, loads);
    else versions.delete(version);
  }

  /**
   * One read of the model's registered versions, then one of each other version's record
   * (pipelined): of the versions not served here, whose replicas are elsewhere (a version
   * served here is another model, as in Triton: its sequences stay its own).
   */
  async #findElsewhere(model: string, version: string, id: SequenceId): Promise<TierRecordElsewhere[]> {
    const versions = await this.#client.hgetall(versionsKey(this.#location.prefix, model));
    const servedHere = this.#servingHere.get(model);
    const others = Object.entries(versions).filter(
      ([other]) => other !== version && servedHere?.has(other) !== true,
    );
    const records = await Promise.all(
      others.map(([other]) => this.#read(recordKey(this.#location.prefix, model, other, id))),
    );
    const found: TierRecordElsewhere[] = [];
    others.forEach(([other, signature], i) => {
      const record = records[i];
      if (record === undefined || record.ended !== undefined) return;
      found.push({ version: other, records: this.forModel(model, other), stateSignature: signature, record });
    });
    return found.sort((a, b) => b.record.writtenAtMs - a.record.writtenAtMs);
  }

  async #read(key: string): Promise<TierRecord | undefined> {
    return toRecord(await this.#client.hgetallBuffer(key));
  }

  async #stamp(key: string): Promise<TierStamp | undefined> {
    const [v, life, ended] = await this.#client.hmget(key, "v", "life", "ended");
    if (v === null || v === undefined || life === null || life === undefined) return undefined;
    return { version: Number(v), life, ended: ended ?? undefined };
  }

  async #renew(
    key: string,
    expect: { readonly version: number; readonly life: string },
    expiry: TierExpiry,
  ): Promise<boolean> {
    const client = this.#client as unknown as ScriptCommands;
    const value = expiry.kind === "idle" ? expiry.ms : expiry.kind === "at" ? expiry.epochMs : 0;
    return Number(await client.renewRecord(key, expect.version, expect.life, expiry.kind, value)) === 1;
  }

  async #write(model: string, version: string, writes: readonly TierWrite[]): Promise<TierWriteResult[]> {
    const client = this.#client as unknown as ScriptCommands;
    const endedTtlMs = this.#location.endedTtlSecs * 1000;
    const keys = writes.map((w) => recordKey(this.#location.prefix, model, version, w.id));
    const argumentsOf = (w: TierWrite): Argument[] => [
      w.mode,
      w.expect?.version ?? 0,
      w.expect?.life ?? "",
      w.life,
      Buffer.from(w.body.buffer, w.body.byteOffset, w.body.byteLength),
      w.endReason ?? "",
      w.expiry.kind,
      w.expiry.kind === "idle" ? w.expiry.ms : w.expiry.kind === "at" ? w.expiry.epochMs : 0,
      endedTtlMs,
      Date.now(),
    ];
    // Ends go by the scripts that run on a full Redis (record-script.ts), the rest by the
    // others; both are issued in this turn, and auto-pipelining sends them together.
    const ends = writes.flatMap((w, i) => (END_MODES.has(w.mode) ? [i] : []));
    const others = writes.flatMap((w, i) => (END_MODES.has(w.mode) ? [] : [i]));
    // Counted apart: a full store still takes ends, which say nothing of its writes.
    const send = (indices: number[], end: boolean): Promise<WriteReply[]> =>
      indices.length === 0
        ? Promise.resolve([])
        : this.#observed(end ? "end" : "write", () => sendNow(indices, end));
    const sendNow = (indices: number[], end: boolean): Promise<WriteReply[]> => {
      if (this.#location.cluster || indices.length === 1) {
        // One call a record (per node in a cluster), sent together.
        return Promise.all(
          indices.map((i) =>
            (end ? client.endRecordBuffer : client.writeRecordBuffer).call(
              client,
              keys[i]!,
              ...argumentsOf(writes[i]!),
            ),
          ),
        );
      }
      // A batch's rows on one server: one script run writes them all, each fenced on its own.
      const args = [...indices.map((i) => keys[i]!), ...indices.flatMap((i) => argumentsOf(writes[i]!))];
      return end
        ? client.endRecordsBuffer(indices.length, ...args)
        : client.writeRecordsBuffer(indices.length, ...args);
    };
    const [endReplies, otherReplies] = await Promise.all([send(ends, true), send(others, false)]);
    const replies: WriteReply[] = new Array(writes.length);
    ends.forEach((index, i) => {
      replies[index] = endReplies[i]!;
    });
    others.forEach((index, i) => {
      replies[index] = otherReplies[i]!;
    });
    // A record gone from under its writer: Redis may have lost its data. Find out before
    // the writer is told, so that it can say so rather than report an ordinary end.
    if (
      replies.some(([written, detail]) => Number(written) !== 1 && toRecord(detail as Buffer[]) === undefined)
    ) {
      await this.#checkMarker().catch(() => {});
    }
    return replies.map(([written, detail]) =>
      Number(written) === 1
        ? { kind: "written", version: Number(detail) }
        : { kind: "conflict", current: toRecord(detail as Buffer[]) },
    );
  }

  /** Runs one request of the store, timed and told to the observer; a failure in clear words (storeFailure). */
  async #observed<T>(operation: StateStoreOperation, run: () => Promise<T>): Promise<T> {
    const started = performance.now();
    try {
      const answer = await run();
      this.#observer.answered(operation, (performance.now() - started) / 1000);
      return answer;
    } catch (error) {
      const failure = storeFailure(error);
      this.#observer.failed(
        operation,
        failure.kind,
        failure.error.message,
        (performance.now() - started) / 1000,
      );
      throw failure.error;
    }
  }

  #track<T>(promise: Promise<T>): Promise<T> {
    this.#writes.add(promise);
    const forget = (): void => {
      this.#writes.delete(promise);
    };
    promise.then(forget, forget);
    return promise;
  }

  async flush(deadlineMs = Number.POSITIVE_INFINITY): Promise<void> {
    const all = async (): Promise<void> => {
      while (this.#writes.size > 0) await Promise.allSettled([...this.#writes]);
    };
    if (this.#writes.size > 0) await untilDeadline(all(), deadlineMs);
  }

  /**
   * Waits for the writes issued so far until `deadlineMs`, then drops the connection.
   * Not QUIT: once the writes are answered, nothing else sent is wanted any more, and
   * QUIT waits for Redis's answer, which an unresponsive Redis (a frozen process, a host
   * whose packets are dropped) never gives: the stop then overran its deadline by the
   * client's command timeout. Writes still unanswered at the deadline fail.
   */
  async close(deadlineMs = Number.POSITIVE_INFINITY): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    await this.flush(deadlineMs);
    this.#client.disconnect();
  }
}
