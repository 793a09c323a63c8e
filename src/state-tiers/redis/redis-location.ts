// The --state-store value for Redis (and Valkey, which speaks the same protocol):
//
//   redis://[user:password@]host[:port][/db][?options]       one server
//   rediss://…                                                the same over TLS
//   redis+cluster://[user:password@]host:port[,host:port…][?options]   Redis Cluster seed nodes
//   rediss+cluster://…                                        the same over TLS
//
// options: prefix=NAME (keys start with NAME:, default "seqserve": replicas that share
// sequences share the prefix), ended_ttl_secs=N (how long an ended sequence's record is
// kept to answer retries and say why it ended, default 600).

interface RedisNode {
  readonly host: string;
  readonly port: number;
}

export interface RedisLocation {
  readonly cluster: boolean;
  readonly tls: boolean;
  readonly nodes: readonly RedisNode[];
  readonly username: string | undefined;
  readonly password: string | undefined;
  readonly db: number;
  readonly prefix: string;
  readonly endedTtlSecs: number;
  /** The location without credentials, for messages and logs. */
  readonly display: string;
}

export class RedisLocationError extends Error {}

const SCHEMES: Readonly<Record<string, { cluster: boolean; tls: boolean }>> = {
  "redis:": { cluster: false, tls: false },
  "rediss:": { cluster: false, tls: true },
  "redis+cluster:": { cluster: true, tls: false },
  "rediss+cluster:": { cluster: true, tls: true },
};

export function isRedisLocation(value: string): boolean {
  const scheme = /^[a-z+]+:/i.exec(value)?.[0]?.toLowerCase();
  return scheme !== undefined && SCHEMES[scheme] !== undefined;
}

function parseNode(text: string, whole: string): RedisNode {
  const match = /^(\[[^\]]+\]|[^:]+)(?::(\d+))?$/.exec(text);
  if (match === null) throw new RedisLocationError(`'${text}' in '${whole}' is not host[:port]`);
  const port = match[2] === undefined ? 6379 : Number(match[2]);
  if (port < 1 || port > 65535) throw new RedisLocationError(`port ${port} in '${whole}' is out of range`);
  return { host: match[1]!.replace(/^\[|\]$/g, ""), port };
}

function wholeNumber(name: string, value: string, whole: string): number {
  if (!/^\d+$/.test(value))
    throw new RedisLocationError(`${name}=${value} in '${whole}' is not a whole number`);
  return Number(value);
}

export function parseRedisLocation(value: string): RedisLocation {
  const schemeMatch = /^([a-z+]+:)\/\/(.*)$/i.exec(value);
  const scheme = SCHEMES[schemeMatch?.[1]?.toLowerCase() ?? ""];
  if (schemeMatch === null || scheme === undefined) {
    throw new RedisLocationError(
      `'${value}' is not a Redis location: expected redis://host[:port][/db], rediss://…, redis+cluster://host:port[,host:port…] or rediss+cluster://…`,
    );
  }
  let rest = schemeMatch[2]!;
  let query = "";
  const q = rest.indexOf("?");
  if (q >= 0) {
    query = rest.slice(q + 1);
    rest = rest.slice(0, q);
  }
  let path = "";
  const slash = rest.indexOf("/");
  if (slash >= 0) {
    path = rest.slice(slash + 1);
    rest = rest.slice(0, slash);
  }
  let username: string | undefined;
  let password: string | undefined;
  const at = rest.lastIndexOf("@");
  if (at >= 0) {
    const credentials = rest.slice(0, at);
    rest = rest.slice(at + 1);
    const colon = credentials.indexOf(":");
    username = decodeURIComponent(colon >= 0 ? credentials.slice(0, colon) : credentials) || undefined;
    password = colon >= 0 ? decodeURIComponent(credentials.slice(colon + 1)) : undefined;
  }
  if (rest === "") throw new RedisLocationError(`'${value}' names no host`);
  const nodes = rest.split(",").map((node) => parseNode(node, value));
  if (!scheme.cluster && nodes.length > 1) {
    throw new RedisLocationError(
      `'${value}' names ${nodes.length} hosts: use redis+cluster:// for the seed nodes of a Redis Cluster`,
    );
  }
  const db = path === "" ? 0 : wholeNumber("the database", path, value);
  if (scheme.cluster && db !== 0)
    throw new RedisLocationError(`'${value}': a Redis Cluster has database 0 only`);
  let prefix = "seqserve";
  let endedTtlSecs = 600;
  for (const [name, raw] of new URLSearchParams(query)) {
    if (name === "prefix") {
      if (raw === "") throw new RedisLocationError(`prefix in '${value}' is empty`);
      prefix = raw;
    } else if (name === "ended_ttl_secs") endedTtlSecs = Math.max(1, wholeNumber(name, raw, value));
    else
      throw new RedisLocationError(
        `unknown option '${name}' in '${value}': expected prefix or ended_ttl_secs`,
      );
  }
  const hosts = nodes.map((n) => `${n.host.includes(":") ? `[${n.host}]` : n.host}:${n.port}`).join(",");
  return {
    ...scheme,
    nodes,
    username,
    password,
    db,
    prefix,
    endedTtlSecs,
    display: `${schemeMatch[1]!.toLowerCase()}//${hosts}${db === 0 ? "" : `/${db}`}`,
  };
}
