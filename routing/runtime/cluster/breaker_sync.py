"""Breaker transitions shared by every process over Redis pub/sub, off the request path.

docs/scale-out.md#shared-breakers. With REDIS_URL set, each serving process runs one
background task (`BreakerSync.run`, started by gateway_project.process):

- **Publish.** The registry listener `on_transition` turns a local open / half-open /
  close into a `Transition` and appends it to an outbox; the task publishes it. The
  request path only appends (no await, no Redis).
- **Apply.** Every other process applies what it hears to its own registry (`apply`):
  "opened at T, cooldown ends at U" opens the link here with the same remaining
  cooldown, "closed" closes it. Own messages, duplicates and messages older than the
  newest transition known for that link are ignored, so applying is idempotent.
- **One probe for the cluster_name.** When an open breaker's cooldown ends, the registry
  asks `gate` before half-opening. The gate answers from memory: this process holds the
  link's probe lease (probe), another one does (stay open until the lease ends or a
  "closed" arrives), or nobody is known to (the task takes the lease with SET NX PX in
  the background; the link stays open meanwhile, a few milliseconds).
- **Fail-open.** While Redis is unreachable the gate lets every process probe on its
  own, nothing is published, `switchboard_degraded{component="redis"}` is 1 and one
  warning is logged; the task reconnects with backoff (0.5 s doubling to 5 s), then
  re-subscribes, re-publishes this process's open breakers and sets the gauge to 0.

- **Remember.** Each published transition is also kept in one Redis hash per cluster
  (`STATE_PREFIX`, one field per link or org view, deleted when it closes), so a process
  that serves nothing -- `manage.py explain_route`, an admin page on another replica --
  reads what requests meet cluster-wide (`shared_states`).

- **Who uses each link.** The "only users" rule of org views (docs/resilience.md#org-views)
  needs every process's knowledge of which orgs use a link: each process writes the
  orgs it admitted (at most every `USERS_EVERY_S`) to a Redis hash per link, and when its
  registry finds the failing orgs to be a link's only users it does not open the link at
  once (`gate_outage`): the task waits until every process has had time to write, reads
  the link's users from Redis, and opens the link only if that still holds
  (`BreakerRegistry.confirm_outage`), then publishes the open like any other.

Forced breakers are not published here: operator controls travel on their own path
(routing.ops.controls, stored in the database). Org views (docs/resilience.md#org-views)
are shared too (open and close), but each process probes an org's view on its own. The Redis client is built like the idempotency store's: short socket
timeouts (`shared_timeout_s`), no retries inside redis-py, one outage logged once.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable, Container
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson

from routing.config.reload import shared_timeout_s
from routing.core.breaker import BreakerKey, BreakerRegistry, State
from routing.plan.explain import BreakerStates, local_states
from routing.runtime.cluster import cluster_scope, redis_session
from routing.runtime.observe import feed

if TYPE_CHECKING:
    from routing.config.snapshot import Snapshot
    from routing.plan.explain import BreakerStates
    from routing.runtime.process import Process

log = logging.getLogger("switchboard.breakers")

CHANNEL_PREFIX = "switchboard:breakers:"  # + the Redis db index (pub/sub ignores the db) + the cluster
LEASE_PREFIX = "switchboard:breaker-probe:"
STATE_PREFIX = "switchboard:breaker-state:"  # + the cluster: hash of the links and org views not closed
STATE_TTL_S = 7 * 86400  # a cluster gone quiet for a week leaves nothing behind
USERS_PREFIX = "switchboard:breaker-users:"  # + cluster + link: hash org -> epoch of its last admission here
USERS_EVERY_S = 0.5  # a process writes its links' users this often (when it admitted any)
USERS_TTL_S = 3600
STATE_NAMES = ("closed", "open", "half_open")
LEASE_WAIT_S = 0.05  # how long a request is told to wait while the lease is being asked for
PING_S = 1.0  # an idle connection is checked this often, so an outage shows within ~1 s
# An outage is confirmed this long after it is suspected: every process has written its users by then
# (each writes at least once a loop pass, which runs at least every PING_S).
CONFIRM_AFTER_S = PING_S + USERS_EVERY_S + 0.5
OUTBOX_MAX = 1000
_RELEASE = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end"


@dataclass(frozen=True, slots=True)
class Transition:
    """One breaker state change as other processes hear it (wall-clock epochs: they share no monotonic clock)."""

    key: BreakerKey
    state: State
    at: float  # when it happened in its origin
    until: float  # open: when the cooldown ends; 0 otherwise
    cooldown_s: float
    origin: str  # the process that made it ("host:pid")
    seq: int = 0  # per origin, increasing: orders one process's transitions made within one clock tick
    org: str | None = None  # an org's own view of the link (docs/resilience.md#org-views); None: the link


def encode(t: Transition) -> bytes:
    """The pub/sub message: one small JSON object."""
    return orjson.dumps(
        {
            "k": t.key.wire(),
            "s": STATE_NAMES[t.state],
            "at": t.at,
            "u": t.until,
            "c": t.cooldown_s,
            "o": t.origin,
            "n": t.seq,
            **({"g": t.org} if t.org is not None else {}),
        }
    )


def decode(raw: bytes | str) -> Transition:
    """Parse a message; ValueError says what is wrong with it."""
    try:
        m = orjson.loads(raw)
        state = State(STATE_NAMES.index(m["s"]))
        t = Transition(
            BreakerKey.from_wire(m["k"]),
            state,
            float(m["at"]),
            float(m["u"]),
            float(m["c"]),
            str(m["o"]),
            int(m.get("n", 0)),
            None if m.get("g") is None else str(m["g"]),
        )
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"not a breaker transition ({exc})") from None
    if t.cooldown_s < 0 or not t.origin:
        raise ValueError("not a breaker transition (negative cooldown or no origin)")
    return t


def channel_for(redis_url: str, cluster: str = "") -> str:
    """The pub/sub channel of this Redis database and cluster (pub/sub is server-wide, keys are per db)."""
    return redis_session.channel_name(CHANNEL_PREFIX, redis_url, cluster)


def lease_key(key: BreakerKey, cluster: str = "") -> str:
    return f"{LEASE_PREFIX}{cluster}:{orjson.dumps(key.wire()).decode()}"


def state_key(cluster: str = "") -> str:
    return f"{STATE_PREFIX}{cluster}"


def users_key(key: BreakerKey, cluster: str = "") -> str:
    return f"{USERS_PREFIX}{cluster}:{orjson.dumps(key.wire()).decode()}"


def state_field(key: BreakerKey, org: str | None) -> bytes:
    """The hash field of a link ([provider, model]) or of an org's view of it ([..., "view:<org>"])."""
    return orjson.dumps(key.wire() + ([f"view:{org}"] if org is not None else []))


@dataclass(frozen=True, slots=True)
class SharedState:
    """A link's (or an org view's) state as the cluster last published it, at read time."""

    key: BreakerKey
    org: str | None
    state: State
    remaining_s: float  # open: seconds of cooldown left; 0: the next request may probe


def shared_states(client: Any, cluster: str, now: float) -> list[SharedState]:
    """What every process of the cluster last published (a sync Redis client; `now` is epoch seconds).

    An open whose cooldown has ended reads half-open: the next request is admitted as the probe.
    """
    out = []
    for raw in client.hgetall(state_key(cluster)).values():
        try:
            t = decode(raw)
        except ValueError:
            continue
        if t.state is State.CLOSED:
            continue
        left = max(t.until - now, 0.0) if t.state is State.OPEN else 0.0
        state = State.OPEN if left > 0 else State.HALF_OPEN
        out.append(SharedState(t.key, t.org, state, left))
    return out


def cluster_of(settings: Any) -> str:
    """Which processes share breakers: SWITCHBOARD_CLUSTER, or else those on one configuration database.

    Two deployments (or test servers) on one Redis but different databases stay apart.
    """
    return cluster_scope.cluster_name(getattr(settings, "SWITCHBOARD_CLUSTER", "") or "", settings.DATABASES["default"])


class BreakerSync(redis_session.ChannelSync):
    """One process's side of the shared breakers; see the module docstring.

    `clock` is this process's monotonic clock (the registry's), `wall` the epoch clock
    carried in messages. `known` holds the breaker keys this process's configuration
    serves (set by the composition root on every snapshot); None accepts every key.
    The session, its backoff and the outage's log line and gauge are `redis_session.ChannelSync`'s.
    """

    name = "breaker sync"
    part = "breakers"
    alone = "breakers are per process"
    shared = "breaker transitions"
    log = log

    def __init__(
        self,
        registry: BreakerRegistry,
        origin: str,
        redis_url: str,
        timeout_s: float = 1.0,
        cluster: str = "",
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(redis_url, channel_for(redis_url, cluster), timeout_s, clock)
        self.registry = registry
        self.origin = origin
        self.cluster = cluster
        self.wall = wall
        self.known: Container[BreakerKey] | None = None
        # newest transition known per link (and per org view): (at, origin, seq)
        self.last: dict[tuple[BreakerKey, str | None], tuple[float, str, int]] = {}
        self.seq = 0
        self.leases: dict[BreakerKey, tuple[bool, float]] = {}  # (held by this process, until on `clock`)
        self.outbox: deque[Transition] = deque(maxlen=OUTBOX_MAX)
        self.wanted: dict[BreakerKey, float] = {}  # leases to ask for: key -> cooldown
        self.releases: deque[BreakerKey] = deque(maxlen=OUTBOX_MAX)
        self._adopting = False
        self.users_sent_at = float("-inf")  # `clock` time up to which admissions were written
        self.users_due = 0.0  # `clock` time of the next write of users
        self.outages: dict[BreakerKey, float] = {}  # links to confirm as outages -> when (`clock`) to
        self._wake: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.published = 0
        self.applied = 0

    # --------------------------------------------------------------- hooks (loop thread, never await)

    def install(self) -> None:
        self.registry.add_listener(self.on_transition)
        self.registry.add_org_listener(self.on_org_transition)
        self.registry.probe_gate = self.gate
        self.registry.outage_gate = self.gate_outage

    def uninstall(self) -> None:
        self.registry.remove_listener(self.on_transition)
        self.registry.remove_org_listener(self.on_org_transition)
        if self.registry.probe_gate == self.gate:
            self.registry.probe_gate = None
        if self.registry.outage_gate == self.gate_outage:
            self.registry.outage_gate = None

    def on_transition(self, key: BreakerKey, old: State, new: State) -> None:
        """Registry listener: queue a local transition for publishing."""
        if self._adopting:
            return
        key = BreakerKey.of(key)
        view = self.registry.view(key)
        if view is None or view.forced_reason is not None:
            return
        now = self.wall()
        until = now + view.cooldown_remaining_s if new is State.OPEN else 0.0
        cooldown = self.registry.cooldown_of(key)
        self.seq += 1
        self.last[(key, None)] = (now, self.origin, self.seq)
        if new is not State.HALF_OPEN:  # the probe's outcome: give the lease back
            lease = self.leases.pop(key, None)
            if lease is not None and lease[0] and self.connected:
                self.releases.append(key)
        if self.connected:
            self.outbox.append(Transition(key, new, now, until, cooldown, self.origin, self.seq))
            self._kick()

    def on_org_transition(self, key: BreakerKey, org: str, old: State, new: State) -> None:
        """Org-view listener: opens and closes of an org's view are shared too (its probes stay per process)."""
        if self._adopting or new is State.HALF_OPEN:
            return
        key = BreakerKey.of(key)
        view = self.registry.org_view(key, org)
        now = self.wall()
        until = now + view.cooldown_remaining_s if view is not None and new is State.OPEN else 0.0
        self.seq += 1
        self.last[(key, org)] = (now, self.origin, self.seq)
        if self.connected:
            cooldown = self.registry.cooldown_of(key)
            self.outbox.append(Transition(key, new, now, until, cooldown, self.origin, self.seq, org))
            self._kick()

    def gate(self, key: BreakerKey, cooldown_s: float) -> float:
        """The registry's probe gate: 0 = probe here; > 0 = stay open that long (see module docstring)."""
        if not self.connected:
            return 0.0  # Redis down: every process probes on its own, as without sharing
        lease = self.leases.get(key)
        now = self.clock()
        if lease is not None and lease[1] > now:
            return 0.0 if lease[0] else lease[1] - now
        if key not in self.wanted:
            self.wanted[key] = cooldown_s
            self._kick()
        return LEASE_WAIT_S

    def gate_outage(self, key: BreakerKey) -> bool:
        """The registry's outage gate: open now (Redis down: local knowledge is all there is), or
        confirm in the background once every process has written which orgs use the link."""
        if not self.connected:
            return True
        if key not in self.outages:
            self.outages[key] = self.clock() + CONFIRM_AFTER_S
        return False

    def apply(self, t: Transition) -> bool:
        """Apply another process's transition here; False when ignored (own, duplicate, stale, unknown link)."""
        if t.origin == self.origin:
            return False
        if self.known is not None and t.key not in self.known:
            return False
        last = self.last.get((t.key, t.org))
        if last is not None and (t.seq <= last[2] if t.origin == last[1] else t.at < last[0]):
            return False  # a duplicate, or older than what this process knows of the link
        self.last[(t.key, t.org)] = (t.at, t.origin, t.seq)
        self._adopting = True
        try:
            if t.org is not None:
                if t.state is State.OPEN:
                    self.registry.adopt_org_open(t.key, t.org, t.until - self.wall(), t.cooldown_s)
                elif t.state is State.CLOSED:
                    self.registry.adopt_org_closed(t.key, t.org)
            elif t.state is State.OPEN:
                self.leases.pop(t.key, None)
                self.registry.adopt_open(t.key, t.until - self.wall(), t.cooldown_s)
            elif t.state is State.CLOSED:
                self.leases.pop(t.key, None)
                self.registry.adopt_closed(t.key)
            elif self.registry.state(t.key) is State.CLOSED:
                # Another process probes: open here too; the gate keeps it open while its lease holds.
                self.registry.adopt_open(t.key, 0.0, t.cooldown_s)
        finally:
            self._adopting = False
        self.applied += 1
        return True

    def _kick(self) -> None:
        wake = self._wake
        if wake is None:
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self._loop:
            wake.set()
        elif self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(wake.set)

    # --------------------------------------------------------------- the background task

    async def run(self) -> None:
        """Connect, subscribe, publish and apply until cancelled; reconnect with backoff on any Redis error
        (local breakers while down). The wake-up is made here: `_kick` may come from another thread."""
        self._loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        await super().run()

    async def _ready(self, client: Any) -> None:
        """Count as connected (publish, take leases) only once Redis answers a command, not just a SUBSCRIBE."""
        await asyncio.wait_for(client.ping(), self.timeout_s)

    async def _read(self, pubsub: Any) -> None:
        while True:
            redis_session.stop_if_cancelled()
            message = await pubsub.get_message(timeout=PING_S)
            if message is None or message.get("type") != "message":
                continue
            try:
                self.apply(decode(message["data"]))
            except ValueError as exc:
                log.warning("ignoring a message on %s: %s", self.channel, exc)

    async def _write(self, client: Any) -> None:
        assert self._wake is not None
        # asyncio.timeout, not wait_for: on Python 3.11 wait_for returns when its awaitable ends in the
        # same loop pass as a cancellation, losing the cancellation (the session's teardown then hangs).
        while True:
            redis_session.stop_if_cancelled()
            try:
                async with asyncio.timeout(PING_S):
                    await self._wake.wait()
            except TimeoutError:
                async with asyncio.timeout(self.timeout_s):
                    await client.ping()
            self._wake.clear()
            while self.releases:
                key = self.releases.popleft()
                async with asyncio.timeout(self.timeout_s):
                    await client.eval(_RELEASE, 1, lease_key(key, self.cluster), self.origin)
            while self.wanted:
                key, cooldown = next(iter(self.wanted.items()))
                await self._take_lease(client, key, cooldown)
                self.wanted.pop(key, None)
            async with asyncio.timeout(self.timeout_s):  # not wait_for: see Syncer.run (shared_limits)
                await self._share_users(client)
            while self.outbox:
                t = self.outbox[0]
                async with asyncio.timeout(self.timeout_s):
                    await client.publish(self.channel, encode(t))
                async with asyncio.timeout(self.timeout_s):
                    await self._remember(client, t)
                self.outbox.popleft()
                self.published += 1

    async def _share_users(self, client: Any) -> None:
        """Write the orgs admitted here since the last write; confirm the outages that are due."""
        now = self.clock()
        offset = self.wall() - now  # this process's monotonic time -> epoch
        due = [key for key, when in self.outages.items() if when <= now]
        if now < self.users_due and not due:
            return
        fresh = self.registry.used_since(self.users_sent_at)
        async with client.pipeline(transaction=False) as pipe:
            for key, org, at in fresh:
                pipe.hset(users_key(key, self.cluster), org or "", repr(at + offset))
            for name in {users_key(key, self.cluster) for key, _, _ in fresh}:
                pipe.expire(name, USERS_TTL_S)
            for key in due:
                pipe.hgetall(users_key(key, self.cluster))
            results = await pipe.execute()
        self.users_sent_at, self.users_due = now, now + USERS_EVERY_S
        for key, users in zip(due, results[len(results) - len(due) :], strict=True):
            del self.outages[key]
            for org, epoch in users.items():
                name = org.decode() if isinstance(org, bytes) else str(org)
                self.registry.note_use(key, name or None, float(epoch) - offset)
            self.registry.confirm_outage(key)

    async def _remember(self, client: Any, t: Transition) -> None:
        """Keep the transition in the cluster's state hash (deleted on close) for `shared_states`."""
        name = state_key(self.cluster)
        async with client.pipeline(transaction=False) as pipe:
            if t.state is State.CLOSED:
                pipe.hdel(name, state_field(t.key, t.org))
            else:
                pipe.hset(name, state_field(t.key, t.org), encode(t))
            pipe.expire(name, STATE_TTL_S)
            await pipe.execute()

    async def _take_lease(self, client: Any, key: BreakerKey, cooldown_s: float) -> None:
        """SET NX PX: this process probes the link for the cluster, or learns until when another does."""
        ttl_ms = max(int(cooldown_s * 1000), 100)
        name = lease_key(key, self.cluster)
        won = await asyncio.wait_for(client.set(name, self.origin, nx=True, px=ttl_ms), self.timeout_s)
        now = self.clock()
        if won:
            self.leases[key] = (True, now + ttl_ms / 1000)
            return
        holder, left_ms = await asyncio.wait_for(self._holder(client, name), self.timeout_s)
        if holder == self.origin.encode():  # ours from before (e.g. a lost probe): keep probing
            self.leases[key] = (True, now + max(left_ms, 0) / 1000)
        elif left_ms > 0:
            self.leases[key] = (False, now + left_ms / 1000)
        # else it expired in between: the next request asks again

    async def _holder(self, client: Any, name: str) -> tuple[bytes | None, int]:
        async with client.pipeline(transaction=False) as pipe:
            pipe.get(name)
            pipe.pttl(name)
            holder, left_ms = await pipe.execute()
        return holder, int(left_ms)

    def _on_up(self) -> None:
        """Connected again: the others learn this process's open links (they may have missed them)."""
        self._republish()

    def _on_down(self) -> None:
        """Redis gone: every gate answers locally; what waited to be sent or asked for is dropped."""
        for key in list(self.outages):  # nobody to ask: decide on what this process knows
            self.registry.confirm_outage(key)
        self.outages.clear()
        self.leases.clear()
        self.wanted.clear()
        self.outbox.clear()
        self.releases.clear()

    def _republish(self) -> None:
        """After (re)connecting: tell the others which links are open here (the originals' times)."""
        now = self.wall()
        for view in self.registry.views():
            if view.forced_reason is not None or view.state is State.CLOSED:
                continue
            key = BreakerKey.of(view.key)
            at = self.last.get((key, None), (now, self.origin, 0))[0]
            until = now + view.cooldown_remaining_s if view.state is State.OPEN else 0.0
            self.seq += 1
            cooldown = self.registry.cooldown_of(key)
            self.outbox.append(Transition(key, view.state, at, until, cooldown, self.origin, self.seq))
        for ov in self.registry.org_views():
            if ov.state is not State.OPEN:
                continue
            key = BreakerKey.of(ov.key)
            at = self.last.get((key, ov.org), (now, self.origin, 0))[0]
            self.seq += 1
            cooldown = self.registry.cooldown_of(key)
            until = now + ov.cooldown_remaining_s
            self.outbox.append(Transition(key, State.OPEN, at, until, cooldown, self.origin, self.seq, ov.org))
        if self.outbox:
            self._kick()


async def run(process: Process) -> None:
    """Background task of gateway_project.process: share the process's breakers while REDIS_URL is set."""
    from django.conf import settings

    url = getattr(settings, "REDIS_URL", "") or ""
    if not url:
        return
    sync = process.breaker_sync
    if sync is None:
        sync = process.breaker_sync = BreakerSync(
            process.breakers, feed.PROCESS_ID, url, shared_timeout_s(), cluster_of(settings)
        )
        sync.install()
        sync.known = process.breaker_keys
    await sync.run()


def set_known(process: Process, keys: set[BreakerKey]) -> None:
    """The breaker keys of the snapshot now serving (called by the composition root on every swap):
    transitions heard from other processes apply to these links only."""
    process.breaker_keys = keys
    if process.breaker_sync is not None:
        process.breaker_sync.known = keys


def breaker_states(snapshot: Snapshot, serving: bool, local: BreakerRegistry | None = None) -> BreakerStates:
    """What requests meet cluster-wide. `serving`: this process serves requests (its registry, `local`, counts).

    With REDIS_URL: the cluster's shared state plus the snapshot's force-opens; Redis
    unreachable, or no REDIS_URL in a process that serves nothing: says so in `source`.
    """
    from django.conf import settings

    url = getattr(settings, "REDIS_URL", "") or ""
    states = BreakerStates(
        "this process"
        if serving
        else "unknown: without REDIS_URL each serving process keeps its breakers in memory "
        "(see the dashboard); only force-opens are shown",
        known=serving,
    )
    if url:
        import redis
        from redis.backoff import NoBackoff
        from redis.retry import Retry

        timeout = shared_timeout_s()
        client = redis.Redis.from_url(
            url, socket_timeout=timeout, socket_connect_timeout=timeout, retry=Retry(NoBackoff(), 0)
        )
        try:
            shared = shared_states(client, cluster_of(settings), time.time())
        except Exception as exc:  # noqa: BLE001 - Redis down: say so, show what is known here
            states.source += f" (Redis unreachable: {type(exc).__name__})"
        else:
            states.source, states.known = "cluster", True
            for st in shared:
                states.put(tuple(st.key), st.org, st.state.name.lower(), st.remaining_s)
        finally:
            client.close()
    now = time.time()
    for override in snapshot.overrides:  # the operators' force-opens, stored in the database
        until = override.until
        if override.action == "force_open" and (until is None or until > now):
            states.put(tuple(override.key), None, "forced", 0.0 if until is None else until - now)
    if serving and local is not None:
        local_states(local, states)
    return states
