"""Circuit breakers per link, in memory (docs/resilience.md#r5).

Closed -> Open after `threshold` consecutive failed requests -> Half-Open after the
cooldown -> exactly one probe is admitted (others are told the circuit is open) ->
the probe's success closes, its failure re-opens for a new cooldown. A probe whose
outcome never comes back is presumed lost after one cooldown and a new one is
admitted. An operator may force a breaker open (maintenance) until reset or expiry.

Org views (docs/resilience.md#org-views): callers that know the request's organisation
pass `org`. Failures no body can cause (`charges_link`: connection refused, timeouts,
502/503/504/529...) charge the shared breaker whoever sent them. The others are
attributed: each org also has its own view of the link, with the same state machine, and
a run of such failures that all come from one org opens only that org's view -- unless
that org is the only one using the link (every org seen on it during the last cooldown
has its view open): then it is an outage and the link opens too. Otherwise the shared
breaker opens only when the run of consecutive failures reached the threshold *and* is
mixed: another org's request (or one with no org) failed too, or the org's view opened
while another org's view was not closed. Any success on the link ends the run. Tracking
"mixed" needs the run's first org and one flag; "who uses the link" is one dict store
per admission.

Everything runs on the event loop thread and never awaits, so no locks. State lives
outside the configuration snapshot: `retain()` keeps it for links that survive a
rebuild.
"""

from __future__ import annotations

import enum
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from routing.core.resilience import Resilience

log = logging.getLogger(__name__)

ORG_PREFIX = "org:"


class BreakerKey(tuple):
    """Which breaker a link uses: (provider, model) shared, (provider, model, "org:<org>") for an
    org's own (BYO) credentials. Built by routing.plan.chain; read everywhere else through
    `provider`, `model`, `org`, `label` and `link`, never by slicing.

    A tuple subclass with no fields of its own: it is the registry's dict key on every attempt,
    so it hashes and compares at plain-tuple speed, and it equals the plain tuple it extends.
    Its wire form (dashboard and channel-layer messages, explain_route) is the JSON list of
    those parts; `from_wire` is the one parser.
    """

    __slots__ = ()

    def __new__(cls, provider: str, model: str, org: str | None = None) -> BreakerKey:
        if org is None:
            return tuple.__new__(cls, (provider, model))
        return tuple.__new__(cls, (provider, model, ORG_PREFIX + org))

    def __getnewargs__(self) -> tuple[str, str, str | None]:  # copy / pickle rebuild through __new__
        return (self[0], self[1], self.org)

    @property
    def provider(self) -> str:
        return self[0]

    @property
    def model(self) -> str:
        return self[1]

    @property
    def org(self) -> str | None:
        """The organisation whose own credentials this breaker guards (None: the shared breaker)."""
        return self[2][len(ORG_PREFIX) :] if len(self) > 2 else None

    @property
    def label(self) -> str:
        """The model label of metrics and the dashboard: "<model>", or "<model>@<org>" for BYO."""
        return f"{self[1]}@{self[2][len(ORG_PREFIX) :]}" if len(self) > 2 else self[1]

    @property
    def link(self) -> str:
        """ "provider/model", or "provider/model@org" for a BYO breaker (logs, dashboard, audit)."""
        return f"{self[0]}/{self.label}"

    def __str__(self) -> str:
        return self.link

    def wire(self) -> list[str]:
        """The JSON form: [provider, model] or [provider, model, "org:<org>"]."""
        return list(self)

    @classmethod
    def from_wire(cls, value: object) -> BreakerKey:
        """Parse the wire form (or "provider/model"); ValueError says what a key looks like."""
        if isinstance(value, str):
            value = value.split("/", 1) if "/" in value else None
        if (
            not isinstance(value, (list, tuple))
            or not 2 <= len(value) <= 3
            or not all(isinstance(part, str) and part for part in value)
        ):
            raise ValueError("key must be [provider, model] or [provider, model, 'org:<org>']")
        if len(value) == 2:
            return cls(value[0], value[1])
        if not value[2].startswith(ORG_PREFIX) or len(value[2]) == len(ORG_PREFIX):
            raise ValueError(f"no organisation for breaker key {value[2]!r}: the third part is 'org:<org>'")
        return cls(value[0], value[1], value[2][len(ORG_PREFIX) :])

    @classmethod
    def of(cls, key: tuple[str, ...]) -> BreakerKey:
        """`key` as a BreakerKey (registry callers such as tests may pass the plain tuple)."""
        return key if type(key) is cls else cls.from_wire(key)


class State(enum.IntEnum):
    CLOSED = 0
    OPEN = 1
    HALF_OPEN = 2


# Admission.probe is a small set of flags (truthy = "this request is a probe"): PROBE_LINK for
# the shared breaker's probe (True is PROBE_LINK, so old callers passing a bool still work),
# PROBE_ORG for the request's org view's probe, or both.
PROBE_LINK = 1
PROBE_ORG = 2


@dataclass(frozen=True, slots=True)
class Admission:
    allowed: bool
    probe: int  # PROBE_LINK | PROBE_ORG flags; 0: not a probe
    retry_after_s: float  # when refused: seconds until a request may be admitted again


@dataclass(frozen=True, slots=True)
class BreakerView:
    key: BreakerKey
    state: State
    consecutive_failures: int
    cooldown_remaining_s: float
    forced_reason: str | None
    forced_until: float | None  # epoch seconds; None = until reset


@dataclass(frozen=True, slots=True)
class OrgView:
    """One organisation's own view of a shared link (only those not closed, or with failures)."""

    key: BreakerKey
    org: str
    state: State
    consecutive_failures: int
    cooldown_remaining_s: float


Listener = Callable[[BreakerKey, State, State], None]
# Asked when an open breaker's cooldown is over, before it half-opens: 0 lets this process
# probe, > 0 keeps the link open that many seconds more (another process holds the cluster's
# probe). Set by the shared-breaker sync (docs/scale-out.md#shared-breakers); O(1), no I/O.
ProbeGate = Callable[[BreakerKey, float], float]
OrgListener = Callable[[BreakerKey, str, State, State], None]
# Asked when the orgs failing on a link look like its only users (docs/resilience.md#org-views):
# True opens the link now; False defers the decision to whoever shares which orgs use links
# across processes, which calls `confirm_outage` once it knows. O(1), no I/O.
OutageGate = Callable[[BreakerKey], bool]

_ALLOWED = Admission(True, 0, 0.0)
_PROBE = Admission(True, PROBE_LINK, 0.0)
_PROBE_ORG = Admission(True, PROBE_ORG, 0.0)
_PROBE_BOTH = Admission(True, PROBE_LINK | PROBE_ORG, 0.0)


class _View:
    """An org's view of a link: the breaker state machine without forcing."""

    __slots__ = ("state", "failures", "opened_at", "probe_at")

    def __init__(self) -> None:
        self.state = State.CLOSED
        self.failures = 0
        self.opened_at = 0.0  # monotonic
        self.probe_at: float | None = None  # monotonic start of the probe in flight


class _Breaker:
    __slots__ = (
        "state",
        "failures",
        "opened_at",
        "probe_at",
        "cooldown_s",
        "forced_reason",
        "forced_until",
        "run_org",
        "mixed",
        "orgs",
    )

    def __init__(self) -> None:
        self.state = State.CLOSED
        self.failures = 0
        self.opened_at = 0.0  # monotonic
        self.probe_at: float | None = None  # monotonic start of the probe in flight
        self.cooldown_s = 30.0
        self.forced_reason: str | None = None
        self.forced_until: float | None = None
        # forced is a separate flag from state so reset/expiry know what to undo
        self.run_org: str | None = None  # the org of the first failure of the current run
        self.mixed = False  # the run has a failure from another org (or from no org)
        self.orgs: dict[str, _View] = {}  # org views with failures or not closed; empty: none


class BreakerRegistry:
    """All breakers of this process, keyed by link."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, wall: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._wall = wall
        self._breakers: dict[BreakerKey, _Breaker] = {}
        # who used each link, and when (monotonic): org -> last admission (None: no org)
        self._used: dict[BreakerKey, dict[str | None, float]] = {}
        self._listeners: list[Listener] = []
        self._org_listeners: list[OrgListener] = []
        self.probe_gate: ProbeGate | None = None
        self.outage_gate: OutageGate | None = None
        self.threshold = 0  # consecutive failed requests that open a breaker
        self.cooldown_s = 0.0  # how long an opened breaker refuses before its probe
        self.configure(Resilience())  # the configuration's defaults until a snapshot is swapped in

    def configure(self, res: Resilience) -> None:
        """The operator's breaker settings, taken from each configuration snapshot swapped in (the
        composition root calls this), so no request passes them. Breakers keep their state; an open
        one's remaining cooldown follows the new setting from its next admission."""
        self.threshold = res.breaker_failure_threshold
        self.cooldown_s = res.breaker_cooldown_s

    # --- request path -----------------------------------------------------

    def admit(self, key: BreakerKey, org: str | None = None) -> Admission:
        """May a request (of `org`) use this link now? A half-open breaker or org view admits one probe.

        The org's own view is asked first, so a request its view refuses never takes the
        shared breaker's probe slot.
        """
        used = self._used.get(key)
        if used is None:
            used = self._used[key] = {}
        used[org] = self._clock()
        b = self._breakers.get(key)
        if b is None:
            return _ALLOWED
        cooldown_s = self.cooldown_s
        view = None
        if org is not None and b.orgs:
            view = b.orgs.get(org)
            if view is not None:
                if view.state is State.CLOSED:
                    view = None
                else:
                    refused = self._gate_view(key, org, view)
                    if refused is not None:
                        return refused
        if b.state is State.CLOSED:
            return _ALLOWED if view is None else _PROBE_ORG
        b.cooldown_s = cooldown_s
        now = self._clock()
        if b.forced_reason is not None:
            if not self._forced_expired(key, b):
                if view is not None:
                    view.probe_at = None  # the org's probe slot was not used after all
                remaining = b.forced_until - self._wall() if b.forced_until is not None else cooldown_s
                return Admission(False, 0, max(remaining, 0.0))
            return _ALLOWED if view is None else _PROBE_ORG
        if b.state is State.OPEN:
            remaining = b.opened_at + cooldown_s - now
            if remaining <= 0 and self.probe_gate is not None:
                remaining = self.probe_gate(key, cooldown_s)
            if remaining > 0:
                if view is not None:
                    view.probe_at = None
                return Admission(False, 0, remaining)
            self._set(key, b, State.HALF_OPEN)
            b.probe_at = None
        # half-open: one probe at a time; a probe silent for a whole cooldown is presumed lost
        if b.probe_at is None or now - b.probe_at >= cooldown_s:
            b.probe_at = now
            return _PROBE if view is None else _PROBE_BOTH
        if view is not None:
            view.probe_at = None
        return Admission(False, 0, b.probe_at + cooldown_s - now)

    def record_success(self, key: BreakerKey, probe: int, org: str | None = None) -> None:
        b = self._breakers.get(key)
        if b is None:
            return
        if org is not None and b.orgs:
            view = b.orgs.get(org)
            if view is not None:
                if view.state is State.CLOSED:
                    del b.orgs[org]  # its failures are forgotten; no view left to keep
                elif probe & PROBE_ORG and view.state is State.HALF_OPEN:
                    del b.orgs[org]
                    self._set_view(key, org, view, State.CLOSED)
        if b.forced_reason is not None:
            return
        if b.state is State.CLOSED:
            b.failures = 0
        elif probe & PROBE_LINK and b.state is State.HALF_OPEN:
            b.failures = 0
            b.probe_at = None
            self._set(key, b, State.CLOSED)
        # a non-probe request admitted before the trip says nothing about now

    def record_failure(
        self,
        key: BreakerKey,
        probe: int,
        org: str | None = None,
        charges_link: bool = False,
    ) -> None:
        """One failed request of `org` on the link.

        `charges_link`: a fault no body can cause (UpstreamFailure.charges_link); it counts
        for the shared breaker as a failure of everyone's, never as one org's."""
        b = self._breakers.get(key)
        if b is None:
            b = self._breakers[key] = _Breaker()
        b.cooldown_s = self.cooldown_s
        shared = org is None or charges_link
        if b.failures == 0:
            b.run_org = org
            b.mixed = shared
        elif shared or org != b.run_org:
            b.mixed = True
        b.failures += 1
        sole = False
        if not shared:
            sole = self._view_failure(key, b, org, probe)
            if sole and self.outage_gate is not None and b.state is State.CLOSED:
                sole = self.outage_gate(key)
        if b.forced_reason is not None:
            return
        if b.state is State.CLOSED:
            if sole or (b.failures >= self.threshold and b.mixed):
                b.opened_at = self._clock()
                self._set(key, b, State.OPEN)
        elif probe & PROBE_LINK and b.state is State.HALF_OPEN:
            b.opened_at = self._clock()
            b.probe_at = None
            self._set(key, b, State.OPEN)

    def release(self, key: BreakerKey, probe: int, org: str | None = None) -> None:
        """The outcome is unknown (client cancelled): free the probe slots without charging."""
        if not probe:
            return
        b = self._breakers.get(key)
        if b is None:
            return
        if probe & PROBE_LINK and b.state is State.HALF_OPEN:
            b.probe_at = None
        if probe & PROBE_ORG and org is not None:
            view = b.orgs.get(org)
            if view is not None and view.state is State.HALF_OPEN:
                view.probe_at = None

    # --- operators, dashboard, metrics ------------------------------------

    def state(self, key: BreakerKey) -> State:
        b = self._breakers.get(key)
        return State.CLOSED if b is None else b.state

    def views(self) -> list[BreakerView]:
        now = self._clock()
        out = []
        for key, b in list(self._breakers.items()):
            if b.forced_reason is not None:
                self._forced_expired(key, b)
            remaining = 0.0
            if b.forced_reason is not None:
                if b.forced_until is not None:
                    remaining = max(b.forced_until - self._wall(), 0.0)
            elif b.state is State.OPEN:
                remaining = b.opened_at + b.cooldown_s - now
                if remaining <= 0 and self.probe_gate is not None:
                    remaining = 0.0  # the next request asks the gate; a view never takes a probe lease
                elif remaining <= 0:
                    remaining = 0.0
                    b.probe_at = None
                    self._set(key, b, State.HALF_OPEN)
            out.append(BreakerView(key, b.state, b.failures, remaining, b.forced_reason, b.forced_until))
        return out

    def view(self, key: BreakerKey) -> BreakerView | None:
        """One breaker's view without side effects (None: it never failed)."""
        b = self._breakers.get(key)
        if b is None:
            return None
        remaining = 0.0
        if b.forced_reason is None and b.state is State.OPEN:
            remaining = max(b.opened_at + b.cooldown_s - self._clock(), 0.0)
        return BreakerView(key, b.state, b.failures, remaining, b.forced_reason, b.forced_until)

    def cooldown_of(self, key: BreakerKey) -> float:
        """The cooldown the link was last used with (30 s before its first use)."""
        b = self._breakers.get(key)
        return 30.0 if b is None else b.cooldown_s

    def adopt_open(self, key: BreakerKey, remaining_s: float, cooldown_s: float) -> bool:
        """Open the link as another process did: its cooldown ends in `remaining_s` here too.

        A forced breaker is left alone (operator controls travel their own way). Listeners
        hear the transition like any other. Returns whether anything changed.
        """
        b = self._breakers.get(key)
        if b is None:
            b = self._breakers[key] = _Breaker()
        if b.forced_reason is not None:
            return False
        b.cooldown_s = cooldown_s
        opened_at = self._clock() + min(max(remaining_s, 0.0), cooldown_s) - cooldown_s
        changed = b.state is not State.OPEN or abs(opened_at - b.opened_at) > 0.05
        b.opened_at = opened_at
        b.probe_at = None
        self._set(key, b, State.OPEN)
        return changed

    def adopt_closed(self, key: BreakerKey) -> bool:
        """Close the link as another process's probe did (org views and forced breakers stay)."""
        b = self._breakers.get(key)
        if b is None or b.forced_reason is not None or b.state is State.CLOSED:
            return False
        b.failures = 0
        b.probe_at = None
        self._set(key, b, State.CLOSED)
        return True

    def org_view(self, key: BreakerKey, org: str) -> OrgView | None:
        """One org's view of a link without side effects (None: it has none)."""
        b = self._breakers.get(key)
        view = None if b is None else b.orgs.get(org)
        if view is None:
            return None
        remaining = 0.0
        if view.state is State.OPEN:
            remaining = max(view.opened_at + b.cooldown_s - self._clock(), 0.0)
        return OrgView(key, org, view.state, view.failures, remaining)

    def adopt_org_open(self, key: BreakerKey, org: str, remaining_s: float, cooldown_s: float) -> None:
        """Open an org's view of the link as another process did, with the same remaining cooldown."""
        b = self._breakers.get(key)
        if b is None:
            b = self._breakers[key] = _Breaker()
        b.cooldown_s = cooldown_s
        view = b.orgs.get(org)
        if view is None:
            view = b.orgs[org] = _View()
        view.opened_at = self._clock() + min(max(remaining_s, 0.0), cooldown_s) - cooldown_s
        view.probe_at = None
        self._set_view(key, org, view, State.OPEN)

    def adopt_org_closed(self, key: BreakerKey, org: str) -> None:
        """Close an org's view of the link as another process's probe did."""
        b = self._breakers.get(key)
        view = None if b is None else b.orgs.get(org)
        if view is not None and view.state is not State.CLOSED:
            del b.orgs[org]
            self._set_view(key, org, view, State.CLOSED)

    def org_views(self) -> list[OrgView]:
        """Every org view that is not closed or has failures (dashboard, metrics)."""
        now = self._clock()
        out = []
        for key, b in list(self._breakers.items()):
            for org, view in list(b.orgs.items()):
                remaining = 0.0
                if view.state is State.OPEN:
                    remaining = view.opened_at + b.cooldown_s - now
                    if remaining <= 0:
                        remaining = 0.0
                        view.probe_at = None
                        self._set_view(key, org, view, State.HALF_OPEN)
                out.append(OrgView(key, org, view.state, view.failures, remaining))
        return out

    def org_state(self, key: BreakerKey, org: str) -> State:
        b = self._breakers.get(key)
        view = None if b is None else b.orgs.get(org)
        return State.CLOSED if view is None else view.state

    def force_open(self, key: BreakerKey, reason: str, until_epoch: float | None) -> None:
        """Keep the link open (maintenance) until `reset()` or `until_epoch` passes."""
        b = self._breakers.get(key)
        if b is None:
            b = self._breakers[key] = _Breaker()
        b.forced_reason = reason or "forced open"
        b.forced_until = until_epoch
        b.opened_at = self._clock()
        b.probe_at = None
        self._set(key, b, State.OPEN)

    def reset(self, key: BreakerKey) -> None:
        """Close the breaker and forget its failures (also ends a forced open)."""
        b = self._breakers.get(key)
        if b is None:
            return
        b.forced_reason = None
        b.forced_until = None
        b.failures = 0
        b.probe_at = None
        self._set(key, b, State.CLOSED)
        views, b.orgs = b.orgs, {}
        for org, view in views.items():
            self._set_view(key, org, view, State.CLOSED)

    def used_since(self, since: float) -> list[tuple[BreakerKey, str | None, float]]:
        """(link, org, monotonic time) of every admission recorded after `since` (to share with other processes)."""
        return [(key, org, at) for key, used in self._used.items() for org, at in used.items() if at > since]

    def note_use(self, key: BreakerKey, org: str | None, at: float) -> None:
        """Another process admitted a request of `org` on the link at `at` (this process's monotonic clock)."""
        used = self._used.get(key)
        if used is None:
            used = self._used[key] = {}
        if at > used.get(org, float("-inf")):
            used[org] = at

    def confirm_outage(self, key: BreakerKey) -> bool:
        """Open the link now if the orgs whose views are open are still all its users (see `outage_gate`)."""
        b = self._breakers.get(key)
        if b is None or b.forced_reason is not None or b.state is not State.CLOSED:
            return False
        now = self._clock()
        if not any(v.state is not State.CLOSED for v in b.orgs.values()) or not self._only_failing_users(key, b, now):
            return False
        b.opened_at = now
        self._set(key, b, State.OPEN)
        return True

    def add_listener(self, fn: Listener) -> None:
        """`fn(key, old, new)` is called on every state change (metrics, dashboard)."""
        self._listeners.append(fn)

    def remove_listener(self, fn: Listener) -> None:
        if fn in self._listeners:
            self._listeners.remove(fn)

    def add_org_listener(self, fn: OrgListener) -> None:
        """`fn(key, org, old, new)` is called on every change of an org's view of a link."""
        self._org_listeners.append(fn)

    def remove_org_listener(self, fn: OrgListener) -> None:
        if fn in self._org_listeners:
            self._org_listeners.remove(fn)

    def retain(self, keys: Iterable[BreakerKey]) -> None:
        """Drop breakers of links that no longer exist; the others keep their state."""
        keep = keys if isinstance(keys, (set, frozenset)) else set(keys)
        for key in [k for k in self._breakers if k not in keep]:
            del self._breakers[key]
        for key in [k for k in self._used if k not in keep]:
            del self._used[key]

    def clear(self) -> None:
        self._breakers.clear()
        self._used.clear()

    # --- internals --------------------------------------------------------

    def _forced_expired(self, key: BreakerKey, b: _Breaker) -> bool:
        if b.forced_until is None or self._wall() < b.forced_until:
            return False
        self.reset(key)
        return True

    def _gate_view(self, key: BreakerKey, org: str, view: _View) -> Admission | None:
        """An open or half-open org view: None when it admits this request as its probe."""
        cooldown_s = self.cooldown_s
        now = self._clock()
        if view.state is State.OPEN:
            remaining = view.opened_at + cooldown_s - now
            if remaining > 0:
                return Admission(False, 0, remaining)
            view.probe_at = None
            self._set_view(key, org, view, State.HALF_OPEN)
        if view.probe_at is None or now - view.probe_at >= cooldown_s:
            view.probe_at = now
            return None
        return Admission(False, 0, view.probe_at + cooldown_s - now)

    def _view_failure(self, key: BreakerKey, b: _Breaker, org: str, probe: int) -> bool:
        """Charge the org's view; True when it opened and its org is among the only users of the link."""
        view = b.orgs.get(org)
        if view is None:
            view = b.orgs[org] = _View()
        view.failures += 1
        if view.state is State.CLOSED:
            if view.failures < self.threshold:
                return False
        elif not (probe & PROBE_ORG and view.state is State.HALF_OPEN):
            return False
        now = self._clock()
        view.opened_at = now
        view.probe_at = None
        self._set_view(key, org, view, State.OPEN)
        # A second org whose own view is (still) not closed: the failures are not one org's.
        if not b.mixed and any(v is not view and v.state is not State.CLOSED for v in b.orgs.values()):
            b.mixed = True
        used = self._used.get(key)
        if used is None:
            used = self._used[key] = {}
        used[org] = now  # the failed request used the link, even when no admission was recorded
        return self._only_failing_users(key, b, now)

    def _only_failing_users(self, key: BreakerKey, b: _Breaker, now: float) -> bool:
        """Has every org that used the link during the last cooldown its view open (or half-open)?

        Then nobody is succeeding on the link: what those orgs see is an outage, and the link
        opens for everyone (docs/resilience.md#org-views). A request without an org counts
        as a user whose view is always closed."""
        used = self._used.get(key)
        if not used:
            return False
        since = now - b.cooldown_s
        for who, at in used.items():
            if at < since:
                continue
            view = b.orgs.get(who) if who is not None else None
            if view is None or view.state is State.CLOSED:
                return False
        return True

    def _set_view(self, key: BreakerKey, org: str, view: _View, new: State) -> None:
        old = view.state
        if old is new:
            return
        view.state = new
        for fn in self._org_listeners:
            try:
                fn(key, org, old, new)
            except Exception:  # a broken listener must not break routing
                log.exception("org breaker listener failed for %s (org %s)", key, org)

    def _set(self, key: BreakerKey, b: _Breaker, new: State) -> None:
        old = b.state
        if old is new:
            return
        b.state = new
        for fn in self._listeners:
            try:
                fn(key, old, new)
            except Exception:  # a broken listener must not break routing
                log.exception("breaker listener failed for %s", key)
