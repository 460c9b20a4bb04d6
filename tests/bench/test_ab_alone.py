"""bench.ab measures each side alone: the other servers are stopped for the measurement and resumed after."""

from __future__ import annotations

import signal
from pathlib import Path
from types import SimpleNamespace

import pytest

from bench import ab


def _side(label: str, pid: int) -> ab.Side:
    side = ab.Side(label=label, root=Path("."), python="python", commit="c")
    side.proc = SimpleNamespace(pid=pid)  # type: ignore[assignment]
    return side


def test_every_other_server_is_stopped_during_the_measurement_and_resumed_after():
    sent: list[tuple[int, int]] = []
    base, head = _side("base", 101), _side("head", 202)
    with ab.alone(head, [base, head], signal_group=lambda pid, sig: sent.append((pid, sig))):
        assert sent == [(101, signal.SIGSTOP)]  # head runs alone; base is frozen
    assert sent == [(101, signal.SIGSTOP), (101, signal.SIGCONT)]


def test_a_failed_measurement_still_resumes_the_stopped_servers():
    sent: list[tuple[int, int]] = []
    base, head = _side("base", 101), _side("head", 202)
    with pytest.raises(RuntimeError):
        with ab.alone(base, [base, head], signal_group=lambda pid, sig: sent.append((pid, sig))):
            raise RuntimeError("a non-200 answer voids the run")
    assert sent == [(202, signal.SIGSTOP), (202, signal.SIGCONT)]
