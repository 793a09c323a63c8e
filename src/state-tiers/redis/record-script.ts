// The one write of a sequence's record, as a Lua script so that the check of the version
// (the fence) and the write are one atomic step in Redis: a replica whose copy of the
// sequence is no longer current can never overwrite the current record. The record is a
// hash: v (version, +1 per write), life (the life's token), body (the core's encoding),
// ended (why it ended, for a tombstone), at (when written, epoch ms), and moved_to for a
// record a reload moved to another version of its model (move-script.ts).
//
// KEYS[1]: the record
// ARGV: mode, expected version, expected life, life, body, end reason, expiry kind
//       (idle | at | never), expiry value (ms or epoch ms), tombstone ttl (ms), now (epoch ms)
// Returns {1, version} when written, or {0, <the record as HGETALL>} when not.

/** The write of one record: `write(key, a)` where `a` holds the ARGV above, from a[1]. */
const WRITE_FUNCTION = `
-- The first command that writes is always an HSET: Redis refuses it on a full store
-- (maxmemory), where a script that has written already is let go on, to stay atomic.
-- (A moved record's moved_to is dropped after it: written again, it no longer says so.)
local function write(key, a)
  local mode = a[1]
  local current = redis.call('HMGET', key, 'v', 'life', 'ended')
  local version = tonumber(current[1]) or 0
  local life = current[2]
  local ended = current[3]
  if mode == 'next' or mode == 'end' then
    if (not life) or ended or life ~= a[3] or version ~= tonumber(a[2]) then return {0, redis.call('HGETALL', key)} end
  elseif mode == 'new_exclusive' or mode == 'create' or mode == 'create_end' then
    if life and not ended then return {0, redis.call('HGETALL', key)} end
  elseif mode == 'force_end' then
    if (not life) or ended then return {0, redis.call('HGETALL', key)} end
  end
  version = version + 1
  if mode == 'end' or mode == 'force_end' or mode == 'new_end' or mode == 'create_end' then
    local keep = life
    if mode == 'new_end' or mode == 'create_end' then keep = a[4] end
    redis.call('HSET', key, 'v', version, 'life', keep, 'body', a[5], 'ended', a[6], 'at', a[10])
    redis.call('HDEL', key, 'moved_to')
    redis.call('PEXPIRE', key, a[9])
  else
    redis.call('HSET', key, 'v', version, 'life', a[4], 'body', a[5], 'at', a[10])
    redis.call('HDEL', key, 'ended', 'moved_to')
    if a[7] == 'idle' then
      redis.call('PEXPIRE', key, a[8])
    elseif a[7] == 'at' then
      redis.call('PEXPIREAT', key, a[8])
    else
      redis.call('PERSIST', key)
    end
  end
  return {1, version}
end
`;

/** The number of ARGV entries per record. */
const WRITE_ARGUMENTS = 10;

/** The modes that end a record: their writes drop its state (see END_SCRIPT_FLAGS). */
export const END_MODES: ReadonlySet<string> = new Set(["end", "force_end", "new_end", "create_end"]);

const ONE_RECORD = `
return write(KEYS[1], ARGV)
`;

/**
 * Several records in one script run (a batch's rows, on one Redis server): KEYS[i] with
 * ARGV[(i-1)*10+1 .. i*10]; one answer per record, in order. Each record is fenced on its
 * own. (A Redis Cluster spreads the keys over nodes: there each record is its own call.)
 */
const SEVERAL_RECORDS = `
local answers = {}
for i = 1, #KEYS do
  local a = {}
  for j = 1, ${WRITE_ARGUMENTS} do a[j] = ARGV[(i - 1) * ${WRITE_ARGUMENTS} + j] end
  answers[i] = write(KEYS[i], a)
end
return answers
`;

export const WRITE_RECORD_LUA = `${WRITE_FUNCTION}${ONE_RECORD}`;
export const WRITE_RECORDS_LUA = `${WRITE_FUNCTION}${SEVERAL_RECORDS}`;

/**
 * Ends run under their own scripts, flagged (Redis 7's script flags) to run when Redis is
 * out of memory: with \`maxmemory\` and \`noeviction\` a full Redis refuses every script
 * that writes, and a store that refused ends could never be freed, since an end is what
 * replaces a record's state by the small record of its end. The flag lets a script write
 * anything, so these scripts take ends only: anything else is an error. Redis before 7
 * does not know script flags (a shebang line is a syntax error there): on it the ends run
 * without the flag, and a full Redis refuses them as it refuses steps.
 */
const END_SCRIPT_FLAGS = "#!lua flags=allow-oom\n";

const ENDS_ONLY = `
local function write_end(key, a)
  if not (a[1] == 'end' or a[1] == 'force_end' or a[1] == 'new_end' or a[1] == 'create_end') then
    return redis.error_reply('an end script was given a ' .. tostring(a[1]) .. ' write')
  end
  return write(key, a)
end
`;

/** The end scripts, with the flag that lets them run on a full Redis when `scriptFlags` (Redis 7 and later). */
export function endScripts(scriptFlags: boolean): { readonly one: string; readonly several: string } {
  const head = `${scriptFlags ? END_SCRIPT_FLAGS : ""}${WRITE_FUNCTION}${ENDS_ONLY}`;
  return {
    one: `${head}${ONE_RECORD.replace("write(", "write_end(")}`,
    several: `${head}${SEVERAL_RECORDS.replace("write(", "write_end(")}`,
  };
}

/**
 * Starts a live record's expiry again without writing it (a step answered from its recorded
 * answer): only if the record is still the version and life the replica holds, so that a
 * record another replica has moved on, or an ended one, keeps the expiry it has.
 * KEYS[1]: the record; ARGV: expected version, expected life, expiry kind, expiry value.
 * Returns 1 when renewed, 0 when not.
 */
export const RENEW_RECORD_LUA = `
local current = redis.call('HMGET', KEYS[1], 'v', 'life', 'ended')
if current[2] ~= ARGV[2] or current[3] or tonumber(current[1]) ~= tonumber(ARGV[1]) then return 0 end
if ARGV[3] == 'idle' then
  redis.call('PEXPIRE', KEYS[1], ARGV[4])
elseif ARGV[3] == 'at' then
  redis.call('PEXPIREAT', KEYS[1], ARGV[4])
else
  redis.call('PERSIST', KEYS[1])
end
return 1
`;
