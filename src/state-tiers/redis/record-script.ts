// The one write of a sequence's record, as a Lua script so that the check of the version
// (the fence) and the write are one atomic step in Redis: a replica whose copy of the
// sequence is no longer current can never overwrite the current record. The record is a
// hash: v (version, +1 per write), life (the life's token), body (the core's encoding),
// ended (why it ended, for a tombstone), at (when written, epoch ms).
//
// KEYS[1]: the record
// ARGV: mode, expected version, expected life, life, body, end reason, expiry kind
//       (idle | at | never), expiry value (ms or epoch ms), tombstone ttl (ms), now (epoch ms)
// Returns {1, version} when written, or {0, <the record as HGETALL>} when not.

export const WRITE_RECORD_LUA = `
local key = KEYS[1]
local mode = ARGV[1]
local current = redis.call('HMGET', key, 'v', 'life', 'ended')
local version = tonumber(current[1]) or 0
local life = current[2]
local ended = current[3]
local function refused()
  return {0, redis.call('HGETALL', key)}
end
if mode == 'next' or mode == 'end' then
  if (not life) or ended or life ~= ARGV[3] or version ~= tonumber(ARGV[2]) then return refused() end
elseif mode == 'new_exclusive' then
  if life and not ended then return refused() end
elseif mode == 'force_end' then
  if (not life) or ended then return refused() end
end
version = version + 1
if mode == 'end' or mode == 'force_end' or mode == 'new_end' then
  local keep = life
  if mode == 'new_end' then keep = ARGV[4] end
  redis.call('HSET', key, 'v', version, 'life', keep, 'body', ARGV[5], 'ended', ARGV[6], 'at', ARGV[10])
  redis.call('PEXPIRE', key, ARGV[9])
else
  redis.call('HSET', key, 'v', version, 'life', ARGV[4], 'body', ARGV[5], 'at', ARGV[10])
  redis.call('HDEL', key, 'ended')
  if ARGV[7] == 'idle' then
    redis.call('PEXPIRE', key, ARGV[8])
  elseif ARGV[7] == 'at' then
    redis.call('PEXPIREAT', key, ARGV[8])
  else
    redis.call('PERSIST', key)
  end
end
return {1, version}
`;
