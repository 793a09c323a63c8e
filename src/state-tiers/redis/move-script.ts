// The move of a sequence's record from one version of its model to another (a reload on
// one replica moved the live sequence to the new version): the new version's record is
// written from the old one's, and the old one is ended in the same script run, keeping
// `moved_to` (the version it went to) so that a replica still serving the old version
// refuses the sequence's next step, saying where it went, instead of advancing the old
// record beside the new one (a fork: two states, each missing the other's steps).
// The old record is checked against the version and life the mover read, as a step's
// write is (record-script.ts): one advanced meanwhile by another replica is not moved,
// and the mover reads it again.
//
// KEYS[1]: the old version's record, KEYS[2]: the new version's.
// ARGV: expected version, life, body (for the new record), fenced body (for the old one:
//       no state), end reason, moved to (version), expiry kind (idle | at | never),
//       expiry value (ms or epoch ms), tombstone ttl (ms), now (epoch ms)
// Returns {1, version} when moved; {0, 'changed', <old record as HGETALL>} when the old
// record is not at the expected version and life; {0, 'occupied', <new record>} when the
// new version already holds a live record of the id (another life, started there).

const EXPIRE = `
local function expire(key, kind, value)
  if kind == 'idle' then
    redis.call('PEXPIRE', key, value)
  elseif kind == 'at' then
    redis.call('PEXPIREAT', key, value)
  else
    redis.call('PERSIST', key)
  end
end
`;

/** Ends the old record with where it went, if it is still at the expected version and life. */
const FENCE = `
local function fence(key, a)
  local current = redis.call('HMGET', key, 'v', 'life', 'ended')
  if (not current[2]) or current[3] or current[2] ~= a[2] or tonumber(current[1]) ~= tonumber(a[1]) then
    return false
  end
  redis.call('HSET', key, 'v', tonumber(current[1]) + 1, 'body', a[4], 'ended', a[5], 'moved_to', a[6], 'at', a[10])
  redis.call('PEXPIRE', key, a[9])
  return true
end
`;

export const MOVE_RECORD_LUA = `${EXPIRE}${FENCE}
local target = redis.call('HMGET', KEYS[2], 'v', 'life', 'ended')
if target[2] and not target[3] then return {0, 'occupied', redis.call('HGETALL', KEYS[2])} end
if not fence(KEYS[1], ARGV) then return {0, 'changed', redis.call('HGETALL', KEYS[1])} end
local version = (tonumber(target[1]) or 0) + 1
redis.call('HSET', KEYS[2], 'v', version, 'life', ARGV[2], 'body', ARGV[3], 'at', ARGV[10])
redis.call('HDEL', KEYS[2], 'ended', 'moved_to')
expire(KEYS[2], ARGV[7], ARGV[8])
return {1, version}
`;

/**
 * A Redis Cluster keeps the two versions' records on different nodes, where one script
 * cannot reach both: the move is this fence of the old record (same ARGV, KEYS[1] only),
 * then the new record's write. A replica that dies between the two loses the sequence
 * (its next request is told that its record is gone), which is never a fork.
 * Returns 1 when fenced, or the old record as HGETALL when it was not at the expected
 * version and life.
 */
export const FENCE_MOVED_RECORD_LUA = `${FENCE}
if fence(KEYS[1], ARGV) then return 1 end
return redis.call('HGETALL', KEYS[1])
`;
