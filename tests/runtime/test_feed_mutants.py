"""The dashboard feed, pinned down where the dashboard tests leave room: the events' ids and fields, the
feed's bounds, one batched message per ~50 ms and only when someone can hear it, emits from other
threads, the once-per-registry listeners, and `call_on_loop` in each situation it meets."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import threading
import time
from types import SimpleNamespace

import pytest

from routing.core.breaker import State
from routing.runtime import process as process_module
from routing.runtime.observe import feed
from routing.runtime.observe.feed import Feed


class Layer:
    """A channel layer other processes could hear (not the in-memory one)."""

    def __init__(self, fail: Exception | None = None, delay: float = 0.0) -> None:
        self.sent: list[tuple[str, dict]] = []
        self.fail = fail
        self.delay = delay

    async def group_send(self, group: str, message: dict) -> None:
        if self.delay:
            await asyncio.sleep(self.delay)
        if self.fail is not None:
            raise self.fail
        self.sent.append((group, message))


class InMemoryChannelLayer(Layer):
    """Named as channels' in-memory layer: reaches no other process."""


@pytest.fixture
def layer(monkeypatch):
    chosen = Layer()
    monkeypatch.setattr(feed.layers, "get_channel_layer", lambda: chosen)
    return chosen


@pytest.fixture
def own_feed():
    """A fresh feed installed as the current process's."""
    mine = Feed()
    previous = process_module.install(SimpleNamespace(feed=mine))  # type: ignore[arg-type]
    yield mine
    process_module.install(previous)


class Registry:
    """A breaker registry's listener slots."""

    def __init__(self) -> None:
        self.listeners: list = []
        self.org_listeners: list = []

    def add_listener(self, fn) -> None:
        self.listeners.append(fn)

    def add_org_listener(self, fn) -> None:
        self.org_listeners.append(fn)


KEEP_ALIVE: list[Registry] = []  # registries are remembered by id: these must not be collected and reused


def test_names_other_processes_rely_on():
    assert feed.DASHBOARD_GROUP == "switchboard.dashboard" and feed.CONTROL_GROUP == "switchboard.control"
    assert feed.PROCESS_ID == f"{socket.gethostname()}:{os.getpid()}"


def test_events_are_numbered_per_process_and_the_feed_keeps_the_last_sixty():
    mine = Feed()
    before = time.time()
    mine.emit("fallback", from_model="a", to_model="b")
    first = mine.recent[0]
    assert first == {
        "id": f"{feed.PROCESS_ID}#1",
        "kind": "fallback",
        "at": first["at"],
        "from_model": "a",
        "to_model": "b",
    }
    assert before <= first["at"] <= time.time()
    for n in range(249):
        mine.emit("probe", n=n)
    assert len(mine.recent) == 60 and mine.recent[0]["id"] == f"{feed.PROCESS_ID}#191"
    assert len(mine.outbox) == 200 and mine.outbox[-1]["id"] == f"{feed.PROCESS_ID}#250"


def test_events_go_out_as_one_message_about_fifty_ms_later(layer):
    mine = Feed()
    mine.viewers = 1

    async def scenario() -> None:
        for n in range(3):
            mine.emit("probe", n=n)
        await asyncio.sleep(0.02)
        assert layer.sent == [] and mine.flush_loop is asyncio.get_running_loop()
        await asyncio.sleep(0.2)
        assert mine.flush_loop is None and not mine.outbox and not mine.tasks
        mine.emit("probe", n=3)
        await asyncio.sleep(0.2)

    asyncio.run(scenario())
    assert [group for group, _ in layer.sent] == [feed.DASHBOARD_GROUP, feed.DASHBOARD_GROUP]
    message = layer.sent[0][1]
    assert message["type"] == "dashboard.events" and message["process"] == feed.PROCESS_ID
    assert [e["n"] for e in message["events"]] == [0, 1, 2]
    assert [e["n"] for e in layer.sent[1][1]["events"]] == [3]


def test_nobody_listening_means_nothing_is_sent_but_the_batch_is_spent(monkeypatch):
    alone = InMemoryChannelLayer()
    monkeypatch.setattr(feed.layers, "get_channel_layer", lambda: alone)
    mine = Feed()

    async def scenario() -> None:
        mine.emit("probe")
        await asyncio.sleep(0.15)

    asyncio.run(scenario())
    assert alone.sent == [] and not mine.outbox and len(mine.recent) == 1
    assert not mine.has_audience()
    mine.viewers = 1
    assert mine.has_audience()


def test_another_process_may_listen_through_a_shared_layer(layer):
    mine = Feed()
    assert mine.has_audience() and feed.shared_layer()

    async def scenario() -> None:
        mine.emit("probe")
        await asyncio.sleep(0.15)

    asyncio.run(scenario())
    assert len(layer.sent) == 1


def test_an_emit_from_another_thread_is_flushed_on_the_serving_loop_and_a_stale_flush_is_replaced(layer):
    mine = Feed()

    async def scenario() -> None:
        mine.loop = asyncio.get_running_loop()
        worker = threading.Thread(target=mine.emit, args=("probe",), kwargs={"n": 1})
        worker.start()
        worker.join(5)
        await asyncio.sleep(0.15)
        assert len(layer.sent) == 1
        stale = asyncio.new_event_loop()
        stale.close()
        mine.flush_loop = stale  # a flush was due on a loop that is gone: one is scheduled here
        mine.emit("probe", n=2)
        await asyncio.sleep(0.15)

    asyncio.run(scenario())
    assert [m["events"][0]["n"] for _, m in layer.sent] == [1, 2]
    gone = Feed()
    gone.loop = asyncio.new_event_loop()
    gone.loop.close()
    gone.emit("probe")  # no loop to flush on: kept in the feed, nothing raised
    assert len(gone.recent) == 1 and gone.flush_loop is None


def test_listeners_are_registered_once_per_registry_and_the_serving_loop_remembered():
    mine = Feed()
    registry = Registry()
    KEEP_ALIVE.append(registry)
    mine.watch(registry)  # type: ignore[arg-type]
    assert mine.loop is None  # no loop running here
    assert mine.on_breaker_change in registry.listeners and mine.on_org_breaker_change in registry.org_listeners
    assert len(registry.listeners) == 2 and len(registry.org_listeners) == 2  # the feed's and the metrics'

    async def again() -> asyncio.AbstractEventLoop:
        mine.watch(registry)  # type: ignore[arg-type]
        return asyncio.get_running_loop()

    loop = asyncio.run(again())
    assert mine.loop is loop and len(registry.listeners) == 2 and len(registry.org_listeners) == 2


def test_breaker_transitions_become_events_with_the_links_name():
    mine = Feed()
    mine.on_breaker_change(("p", "m"), State.CLOSED, State.OPEN)
    mine.on_breaker_change(("p", "m"), State.OPEN, State.HALF_OPEN)
    mine.on_org_breaker_change(("p", "m"), "acme", State.HALF_OPEN, State.CLOSED)
    plain, probe, org = (dict(e) for e in mine.recent)
    for event in (plain, probe, org):
        event.pop("id"), event.pop("at")
    assert plain == {"kind": "breaker", "key": ["p", "m"], "link": "p/m", "old": "closed", "new": "open"}
    assert (probe["old"], probe["new"]) == ("open", "half_open")
    assert org == {
        "kind": "breaker",
        "key": ["p", "m"],
        "org": "acme",
        "link": "p/m (org acme)",
        "old": "half_open",
        "new": "closed",
    }


def test_call_on_loop_runs_here_without_a_running_serving_loop_and_on_it_otherwise():
    mine = Feed()
    here = threading.get_ident()
    assert mine.call_on_loop(threading.get_ident) == here  # no loop
    idle = asyncio.new_event_loop()
    mine.loop = idle
    assert mine.call_on_loop(threading.get_ident) == here  # a loop not running
    idle.close()
    assert mine.call_on_loop(threading.get_ident) == here  # a closed loop

    async def on_the_loop() -> int:
        mine.loop = asyncio.get_running_loop()
        return mine.call_on_loop(threading.get_ident)  # already on it: no deadlock

    assert asyncio.run(on_the_loop()) == here

    serving = asyncio.new_event_loop()
    thread = threading.Thread(target=serving.run_forever, daemon=True)
    thread.start()
    mine.loop = serving
    try:
        assert mine.call_on_loop(threading.get_ident) == thread.ident
        serving.call_soon_threadsafe(time.sleep, 0.5)  # the loop is busy
        with pytest.raises(TimeoutError):
            mine.call_on_loop(threading.get_ident, timeout_s=0.05)
        assert mine.call_on_loop(threading.get_ident) == thread.ident  # the default bound outwaits a busy loop
    finally:
        serving.call_soon_threadsafe(serving.stop)
        thread.join(5)
        serving.close()


# --- the module's functions: the installed process's feed --------------------------------------------


def test_module_functions_reach_the_installed_feed(own_feed, layer):
    feed.note_fallback("a", "b", "circuit_open")
    probe = SimpleNamespace(
        name="op-a", status="down", latency_ms=12.5, checked_at="2026-01-01T00:00:00Z", detail="HTTP 503"
    )
    feed.note_probe(probe)
    events = feed.events()
    assert [e["kind"] for e in events] == ["fallback", "probe"]
    assert (events[0]["from_model"], events[0]["to_model"], events[0]["reason"]) == ("a", "b", "circuit_open")
    assert {k: events[1][k] for k in ("provider", "status", "latency_ms", "checked_at", "detail")} == {
        "provider": "op-a", "status": "down", "latency_ms": 12.5, "checked_at": "2026-01-01T00:00:00Z", "detail": "HTTP 503",
    }  # fmt: skip
    events.clear()
    assert len(feed.events()) == 2  # a copy
    own_feed.viewers = 1
    assert feed.has_audience()
    registry = Registry()
    KEEP_ALIVE.append(registry)
    feed.install(registry)  # type: ignore[arg-type]
    assert own_feed.on_breaker_change in registry.listeners
    own_feed.loop = None
    assert feed.call_on_loop(lambda: "ran") == "ran"


def test_without_an_installed_process_events_are_dropped_and_calls_run_here(monkeypatch):
    previous = process_module.install(None)
    try:
        feed.emit("probe")
        assert feed.events() == []
        monkeypatch.setattr(feed.layers, "get_channel_layer", lambda: InMemoryChannelLayer())
        assert not feed.has_audience()
        monkeypatch.setattr(feed.layers, "get_channel_layer", lambda: Layer())
        assert feed.has_audience()
        registry = Registry()
        feed.install(registry)  # type: ignore[arg-type]
        assert registry.listeners == []
        assert feed.call_on_loop(threading.get_ident) == threading.get_ident()
    finally:
        process_module.install(previous)


def test_publishing_without_a_layer_or_with_one_down_never_raises(monkeypatch, settings, caplog):
    settings.SWITCHBOARD_SHARED_TIMEOUT_S = 0.05
    caplog.set_level(logging.DEBUG, "switchboard.dashboard")
    monkeypatch.setattr(feed.layers, "get_channel_layer", lambda: None)
    assert not feed.shared_layer()
    asyncio.run(feed.publish("g", {"type": "x"}))
    down = Layer(fail=ConnectionError("refused"))
    monkeypatch.setattr(feed.layers, "get_channel_layer", lambda: down)
    asyncio.run(feed.publish("g", {"type": "x"}))
    assert "dashboard publish to g failed: refused" in caplog.messages
    slow = Layer(delay=1.0)
    monkeypatch.setattr(feed.layers, "get_channel_layer", lambda: slow)
    started = time.monotonic()
    asyncio.run(feed.publish("g", {"type": "x"}))
    assert time.monotonic() - started < 0.5 and slow.sent == []
    fine = Layer()
    monkeypatch.setattr(feed.layers, "get_channel_layer", lambda: fine)
    asyncio.run(feed.publish("g", {"type": "x"}))
    assert fine.sent == [("g", {"type": "x"})]
