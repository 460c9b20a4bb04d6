"""Concurrency seats: a deployment's `max` concurrent calls split over the serving processes by demand,
through Redis (docs/overload.md#processes). The lease rounds (routing.runtime.cluster.shared_leases) carry
one seats claim per limited deployment; this module is the claim's script and what a round does with
its answer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from routing.runtime.cluster.shared_scripts import KEY_PREFIX

if TYPE_CHECKING:
    from routing.core.admission_queue import Gates

BEAT_S = 1.0  # heartbeat of a process with concurrency limits and nothing else to share
# A deployment's concurrency seats (docs/overload.md#processes): the cluster's `max` split between the
# processes calling it by demand, not evenly. Each process sends its demand (calls in flight + requests
# waiting) and wants a quarter more (at least 1: room for its limit to grow into; nothing without demand).
# Its fair share is
# max-min fair over the wants of every live process that calls the deployment: a process wanting less
# than an equal share gets what it wants, the others split the rest equally; seats nobody wants are
# split evenly over all live processes (those that have not called it yet too), so an idle process keeps
# room for a burst until another needs it. It gets at most what the other live processes do not hold
# (0 when they hold them all: its requests wait), so the cluster never holds more than `max`. It records
# what it holds, "holds:demand": its seats, or its calls in flight if more (admitted on seats it had:
# nobody may take those before they end). A process no longer alive (not in the processes set) is
# dropped. Beside the seats, each process records "refusals:class": how many refusals (429s, timeouts) it
# has met calling the deployment and the most important class waiting there (a number: 0 interactive;
# higher when none waits); it learns the sum of the other live processes' refusals and the most important
# class waiting among them. The upstream's capacity is one for them all: news of a refusal elsewhere holds
# a limit's growth, and a process lends to one whose waiters matter more (docs/overload.md#processes).
# KEYS[1] hash, KEYS[2] processes, KEYS[3] refusals hash; ARGV me, in flight, demand, max, ttl, refusals,
# class -> {seats, contended: 1 when the processes want more than the max between them, and each should
# come back every round; the other live processes' refusals; the best class waiting among them, 99 none}.
SEATS_SCRIPT = """
local alive, n = {}, 0
for _, id in ipairs(redis.call('ZRANGE', KEYS[2], 0, -1)) do alive[id] = true; n = n + 1 end
local function want(d) if d <= 0 then return 0 end return d + math.max(1, math.ceil(d / 4)) end
local total = tonumber(ARGV[4])
local mine = want(tonumber(ARGV[3]))
local wants, held, asked = {mine}, 0, mine
local rows = redis.call('HGETALL', KEYS[1])
for i = 1, #rows, 2 do
  local id = rows[i]
  if id ~= ARGV[1] then
    if alive[id] then
      local h, d = string.match(rows[i + 1], '^(%d+):(%d+)$')
      held = held + (tonumber(h) or 0)
      local w = want(tonumber(d) or 0)
      wants[#wants + 1] = w
      asked = asked + w
    else
      redis.call('HDEL', KEYS[1], id)
    end
  end
end
if n < #wants then n = #wants end
local fair = mine
if asked <= total then
  fair = mine + math.ceil((total - asked) / n)
else
  table.sort(wants)
  local left, count = total, #wants
  for _, w in ipairs(wants) do
    if w > left / count then break end
    left = left - w
    count = count - 1
  end
  if count > 0 then fair = math.min(mine, math.ceil(left / count)) end
end
local seats = math.max(math.min(fair, total - held), 0)
redis.call('HSET', KEYS[1], ARGV[1], string.format('%d:%d', math.max(seats, tonumber(ARGV[2])), tonumber(ARGV[3])))
redis.call('EXPIRE', KEYS[1], ARGV[5])
redis.call('HSET', KEYS[3], ARGV[1], string.format('%d:%d', tonumber(ARGV[6]), tonumber(ARGV[7])))
local refused, best = 0, 99
local counts = redis.call('HGETALL', KEYS[3])
for i = 1, #counts, 2 do
  if counts[i] ~= ARGV[1] then
    if alive[counts[i]] then
      local r, c = string.match(counts[i + 1], '^(%d+):(%d+)$')
      refused = refused + (tonumber(r) or 0)
      best = math.min(best, tonumber(c) or 99)
    else
      redis.call('HDEL', KEYS[3], counts[i])
    end
  end
end
redis.call('EXPIRE', KEYS[3], ARGV[5])
if asked > total then return {seats, 1, refused, best} end
return {seats, 0, refused, best}
"""
SEATS_TTL_S = 60  # a deployment nobody has called this long: its seats hash may go


def seats_key(name: str, prefix: str = KEY_PREFIX) -> str:
    """The Redis hash of one deployment's concurrency seats (by its gate's ident: the breaker key's parts)."""
    return f"{prefix}seats:{name}"


def refusals_key(name: str, prefix: str = KEY_PREFIX) -> str:
    """The Redis hash of the refusals each process met calling one deployment (by process id)."""
    return f"{prefix}seats-refused:{name}"


class Seating:
    """The seats side of a `Syncer` round (a mixin: the syncer holds the gates and the round's state)."""

    gates: Gates | None
    _beat_at: float
    _contended: bool

    def _beat_due(self, mono: float) -> bool:
        """Concurrency limits configured: the count of processes and the seats are kept fresh even with nothing
        else to share, once every BEAT_S; every round while requests wait for a deployment here, or while the
        processes want more seats than there are (an idle one then gives its seats back within a round, not a
        second: docs/overload.md#processes)."""
        gates = self.gates
        if gates is None or not gates.on:
            return False
        return mono - self._beat_at >= BEAT_S or self._contended or gates.hungry()

    def _apply_seats(self, seat_plans: list[tuple[str, int, int, int, int, int]], results: list[Any]) -> None:
        """The seats Redis granted each gate of this process; whether the processes want more than there is;
        the refusals the other processes met and the most important class waiting among them."""
        if self.gates is not None:
            pairs = list(zip(seat_plans, results, strict=True))
            self.gates.seat({plan[0]: int(result[0]) for plan, result in pairs})
            self.gates.elsewhere({plan[0]: (int(result[2]), int(result[3])) for plan, result in pairs})
            self._contended = any(int(result[1]) for result in results)
