"""Background tasks log one line when their dependency starts failing and one when it works
again, never a line (or a traceback) per retry (docs/operations.md#outages)."""

from __future__ import annotations

import asyncio
import logging

import pytest
import redis.exceptions

from gateway_project import process as root
from routing.runtime.observe.outage import Outage


@pytest.fixture
def fast_restarts(monkeypatch):
    monkeypatch.setattr(root, "FIRST_DELAY_S", 0.001)
    monkeypatch.setattr(root, "RECOVERED_S", 0.05)


def _lines(caplog, name: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if name in r.getMessage()]


def test_a_redis_outage_of_a_background_task_is_one_line_then_one_recovery_line(fast_restarts, caplog):
    tries = 0
    running = asyncio.Event()

    async def listener() -> None:  # fails 6 times like a listener on a stopped Redis, then runs
        nonlocal tries
        tries += 1
        if tries <= 6:
            raise redis.exceptions.ConnectionError("Error 111 connecting to 127.0.0.1:6379. Connection refused.")
        running.set()
        await asyncio.sleep(3600)

    async def scenario() -> None:
        task = root._spawn("config-listener", listener)
        await asyncio.wait_for(running.wait(), 10)
        await asyncio.sleep(0.2)  # past RECOVERED_S
        task.cancel()

    with caplog.at_level(logging.INFO, logger="switchboard"):
        asyncio.run(scenario())
    lines = _lines(caplog, "background task config-listener")
    assert [r.getMessage().split(" (")[0].split(" after")[0] for r in lines] == [
        "background task config-listener failed",
        "background task config-listener works again",
    ]
    assert "Connection refused" in lines[0].getMessage() and lines[0].exc_info in (None, False)
    assert "after 6 failed tries" in lines[1].getMessage()


def test_a_bug_in_a_background_task_keeps_its_traceback_once(fast_restarts, caplog):
    tries = 0

    async def buggy() -> None:
        nonlocal tries
        tries += 1
        if tries < 4:
            raise KeyError("application_instance")

    async def scenario() -> None:
        await asyncio.wait_for(root._spawn("buggy", buggy), 10)

    with caplog.at_level(logging.INFO, logger="switchboard"):
        asyncio.run(scenario())
    (line,) = [r for r in _lines(caplog, "background task buggy") if "failed" in r.getMessage()]
    assert line.exc_info and line.exc_info[0] is KeyError


def test_a_database_outage_of_a_poll_is_one_line_per_outage_and_one_per_recovery(caplog):
    log = logging.getLogger("switchboard")
    outage = Outage(log, "configuration version check", "serving the last snapshot")
    with caplog.at_level(logging.INFO, logger="switchboard"):
        for _ in range(2):  # two outages, each polled many times
            for _ in range(50):
                outage.failed(OSError("connection to server at 10.0.0.9 failed: timeout expired"))
            for _ in range(5):
                outage.ok()
    messages = [r.getMessage() for r in _lines(caplog, "configuration version check")]
    assert len(messages) == 4
    assert messages[0].startswith("configuration version check failed (OSError: connection to server")
    assert messages[1] == "configuration version check works again after 50 failed tries in 0 s"
