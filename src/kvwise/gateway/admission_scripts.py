"""The Lua scripts of the shared admission store: each runs atomically inside Redis.

Keys (the prefix, `kvwise:admission:` by default, is ARGV[1] of every script):
    instances            sorted set: gateway instance id -> lease expiry (Redis clock, ms)
    instance:{id}        hash: reservation id -> "replica url\\ntokens\\nsequences"
    replica:{url}        hash: tokens, running, seqs (sums over every live instance)

A replica is named by its URL, the one thing every gateway instance in front of it agrees on.
Time is Redis's own (`TIME`; allowed in scripts since Redis 5 replicates their effects), so the
gateways' clocks never matter. Every script first drops the instances whose lease has run out
(their reservations come off the replica totals), so a crashed instance's share returns at the
first call made after its lease expires, by whichever instance makes it.

Replies are flat integer arrays: a status (1 granted / done, 0 refused / unknown reservation,
-1 this instance's lease is gone: it must register again) then replica totals
(tokens, running, seqs), once per replica asked about.
"""

from __future__ import annotations

_COMMON = """
local P = ARGV[1]
local clock = redis.call('TIME')
local now_ms = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)

local function totals(url)
  local v = redis.call('HMGET', P .. 'replica:' .. url, 'tokens', 'running', 'seqs')
  return {tonumber(v[1]) or 0, tonumber(v[2]) or 0, tonumber(v[3]) or 0}
end

local function add(url, tokens, seqs, sign)
  local key = P .. 'replica:' .. url
  redis.call('HINCRBY', key, 'tokens', sign * tokens)
  redis.call('HINCRBY', key, 'running', sign)
  redis.call('HINCRBY', key, 'seqs', sign * seqs)
end

local function parse(value)
  local url, tokens, seqs = string.match(value, '^(.*)\\n(%d+)\\n(%d+)$')
  return url, tonumber(tokens), tonumber(seqs)
end

local function drop_instance(id)
  local held = redis.call('HGETALL', P .. 'instance:' .. id)
  for i = 2, #held, 2 do
    local url, tokens, seqs = parse(held[i])
    add(url, tokens, seqs, -1)
  end
  redis.call('DEL', P .. 'instance:' .. id)
  redis.call('ZREM', P .. 'instances', id)
end

for _, id in ipairs(redis.call('ZRANGEBYSCORE', P .. 'instances', '-inf', now_ms)) do
  drop_instance(id)
end

local function is_live(id, ttl_ms)
  if not redis.call('ZSCORE', P .. 'instances', id) then
    return false
  end
  redis.call('ZADD', P .. 'instances', now_ms + ttl_ms, id)
  return true
end
"""

# ARGV: prefix, instance, ttl_ms, reservation id, url, tokens, seqs, budget_tokens, max_seqs
# (0: no running cap). A replica with nothing running takes one request whatever its size, so a
# request larger than the budget runs alone, as in the in-process admission.
RESERVE = (
    _COMMON
    + """
local id, rid, url = ARGV[2], ARGV[4], ARGV[5]
local tokens, seqs = tonumber(ARGV[6]), tonumber(ARGV[7])
local budget, max_seqs = tonumber(ARGV[8]), tonumber(ARGV[9])
if not is_live(id, tonumber(ARGV[3])) then
  return {-1, 0, 0, 0}
end
local t = totals(url)
if redis.call('HEXISTS', P .. 'instance:' .. id, rid) == 1 then
  return {1, t[1], t[2], t[3]}  -- already held (re-registered while this call was on its way)
end
if t[2] > 0 and ((max_seqs > 0 and t[3] + seqs > max_seqs) or t[1] + tokens > budget) then
  return {0, t[1], t[2], t[3]}
end
add(url, tokens, seqs, 1)
redis.call('HSET', P .. 'instance:' .. id, rid, url .. '\\n' .. tokens .. '\\n' .. seqs)
return {1, t[1] + tokens, t[2] + 1, t[3] + seqs}
"""
)

# ARGV: prefix, instance, reservation id. Idempotent: an unknown id changes nothing (0).
RELEASE = (
    _COMMON
    + """
local key = P .. 'instance:' .. ARGV[2]
local value = redis.call('HGET', key, ARGV[3])
if not value then
  return {0, 0, 0, 0}
end
redis.call('HDEL', key, ARGV[3])
local url, tokens, seqs = parse(value)
add(url, tokens, seqs, -1)
local t = totals(url)
return {1, t[1], t[2], t[3]}
"""
)

# ARGV: prefix, instance, ttl_ms, url... -> status, then the totals of each url in order.
RENEW = (
    _COMMON
    + """
if not is_live(ARGV[2], tonumber(ARGV[3])) then
  return {-1}
end
local reply = {1}
for i = 4, #ARGV do
  local t = totals(ARGV[i])
  table.insert(reply, t[1]); table.insert(reply, t[2]); table.insert(reply, t[3])
end
return reply
"""
)

# ARGV: prefix, instance, ttl_ms, then (reservation id, url, tokens, seqs) per reservation the
# instance holds. Replaces whatever Redis had for this instance: after its lease ran out (a
# network partition, Redis restarted empty), what runs on the engines is counted again, budget
# or not, since it is running there already.
REGISTER = (
    _COMMON
    + """
local id = ARGV[2]
drop_instance(id)
redis.call('ZADD', P .. 'instances', now_ms + tonumber(ARGV[3]), id)
for i = 4, #ARGV, 4 do
  local url, tokens, seqs = ARGV[i + 1], tonumber(ARGV[i + 2]), tonumber(ARGV[i + 3])
  add(url, tokens, seqs, 1)
  redis.call('HSET', P .. 'instance:' .. id, ARGV[i], url .. '\\n' .. tokens .. '\\n' .. seqs)
end
return {1}
"""
)
