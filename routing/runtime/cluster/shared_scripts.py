"""The Redis side of the lease protocol: the Lua scripts a lease round runs and the keys it runs them on
(docs/limits.md#shared). The seats claim's script is routing.runtime.cluster.shared_seats'; the rebuild's
routing.runtime.cluster.shared_recovery's.
"""

from __future__ import annotations

import hashlib
from typing import Any

from routing.core.budget_accounts import Account

KEY_PREFIX = "switchboard:limits:"  # + the cluster's namespace (one per database: `namespace`)
PROCESS_TTL_S = 10.0  # a process not heard from this long no longer counts for the even share

# The lease: add what the process owes (spent beyond its lease, or an outage share), then
# grant up to `want` without passing the limit (want < 0 gives back). Seeded when absent; with
# `floor` set, raised to at least the seed (an account read again from the records). Nothing
# happens while the cluster's seed marker is not the epoch the process synced with: Redis lost
# the counters and they are being rebuilt from the usage records (Syncer._reseed) -> {-1, -1}.
# The same call adds what the process settled since its last round to the account's settled-spend
# counter (what budget alerts compare against: spend billed, never allowance leased out), seeded like the
# counter from the process's view of the settled spend when absent (then holding its part already).
# KEYS[1] counter, KEYS[2] seed marker, KEYS[3] settled counter; ARGV limit, want, owed, seed, ttl, epoch,
# floor, settled delta, settled seed (amounts µUSD, ttl s) -> {grant, counter, settled}
LEASE_SCRIPT = """
if redis.call('GET', KEYS[2]) ~= ARGV[6] then return {-1, -1, -1} end
local paid = redis.call('GET', KEYS[3])
if paid then paid = tonumber(paid) + tonumber(ARGV[8]) else paid = tonumber(ARGV[9]) end
if ARGV[7] == '1' then paid = math.max(paid, tonumber(ARGV[9])) end
redis.call('SET', KEYS[3], string.format('%.0f', paid), 'EX', ARGV[5])
local cur = tonumber(redis.call('GET', KEYS[1]) or ARGV[4])
if ARGV[7] == '1' then cur = math.max(cur, tonumber(ARGV[4])) end
local limit = tonumber(ARGV[1])
local want = tonumber(ARGV[2])
cur = cur + tonumber(ARGV[3])
local grant = want
if want > 0 then
  grant = math.min(want, limit - cur)
  if grant < 0 then grant = 0 end
end
cur = cur + grant
redis.call('SET', KEYS[1], string.format('%.0f', cur), 'EX', ARGV[5])
return {grant, cur, paid}
"""

# A cluster token bucket (the level refilled by Redis's own clock, capacity per minute), from
# which processes take shares: add the debt, then grant up to `want` whole tokens (want < 0
# gives back). An absent key starts at `seen`: the level the asking process last saw, refilled
# since (full for a bucket it never saw), so a bucket Redis lost (restarted empty, flushed, the
# key gone) does not reopen in full (docs/limits.md#reseed). KEYS[1] hash; ARGV capacity, want,
# owed, ttl, seen.
BUCKET_SCRIPT = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local cap = tonumber(ARGV[1])
local state = redis.call('HMGET', KEYS[1], 'l', 's')
local lvl = tonumber(state[1]) or math.min(tonumber(ARGV[5]), cap)
local st = tonumber(state[2]) or now
lvl = lvl + (now - st) * cap / 60
if lvl > cap then lvl = cap end
lvl = lvl - tonumber(ARGV[3])
local want = tonumber(ARGV[2])
local grant = want
if want > 0 then
  grant = math.floor(math.min(want, lvl))
  if grant < 0 then grant = 0 end
end
lvl = lvl - grant
if lvl > cap then lvl = cap end
redis.call('HSET', KEYS[1], 'l', tostring(lvl), 's', string.format('%.6f', now))
redis.call('EXPIRE', KEYS[1], ARGV[4])
return {tostring(grant), tostring(lvl)}
"""
BUCKET_TTL_S = 120  # a bucket untouched this long is full again: its key may go


def bucket_key(key: tuple[str, ...], prefix: str = KEY_PREFIX) -> str:
    """The Redis hash of one cluster bucket (org, agent or deployment; requests or tokens)."""
    return f"{prefix}bucket:{'/'.join(key)}"


def account_key(account: Account, prefix: str = KEY_PREFIX) -> str:
    """The Redis counter of one account's current period."""
    return f"{prefix}budget:{int(account.start)}:{'/'.join(account.key)}"


def settled_key(account: Account, prefix: str = KEY_PREFIX) -> str:
    """The Redis counter of one account's settled (billed) spend in its current period (docs/alerts.md#events)."""
    return f"{prefix}settled:{int(account.start)}:{'/'.join(account.key)}"


def namespace(database: dict[str, Any]) -> str:
    """The cluster's key namespace: processes on the same database share limits, others never do."""
    ident = f"{database.get('ENGINE')}|{database.get('HOST')}|{database.get('PORT')}|{database.get('NAME')}"
    return hashlib.sha256(ident.encode()).hexdigest()[:12]
