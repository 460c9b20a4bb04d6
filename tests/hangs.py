"""A test that hangs fails with its name and the run goes on (docs/testing.md#hangs).

pytest-timeout (method "signal", pyproject.toml) raises in the main thread when a test outlives
its timeout: the test fails where it hangs, its fixtures' finalizers run (servers stopped) and
the next test starts. Two gaps of the plugin are closed here:

- it cancels the alarm as soon as any phase fails (meant for --pdb), so the teardown of a test
  that failed or timed out had no bound at all; here the alarm stays set to the end of the test
  unless pdb is in use;
- once fired, the alarm fires again every `timeout_teardown_grace` seconds (10) while the teardown stays stuck (a
  task swallowing its cancellation holds the event loop's close, a fixture waits on a server).

Should nothing get through (a hang in C code holding the interpreter), a thread ends the run
six graces after the timeout with every thread's stack, as the plugin's "thread" method
does; the servers the harness started die with the run (tests/e2e/harness.py).
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import pytest_timeout

_STOP = pytest.StashKey[Callable[[], None]]()
_GRACE = pytest.StashKey[float]()  # set once the test timed out: its phases left get this long each


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini(
        "timeout_teardown_grace",
        "seconds a timed-out test's stuck teardown gets before the alarm fires again; the run is ended "
        "six of them after the timeout should nothing get through (tests/hangs.py)",
        default="10",
    )


@pytest.hookimpl(tryfirst=True)
def pytest_timeout_set_timer(item: pytest.Item, settings: Any) -> bool | None:
    """The signal method, fired again while a timed-out test's teardown hangs, backed by a thread;
    other methods, and tests run outside the main thread, are left to pytest-timeout."""
    if settings.method != "signal" or threading.current_thread() is not threading.main_thread():
        return None
    grace = float(item.config.getini("timeout_teardown_grace"))
    backstop_after = 6 * grace

    def on_alarm(signum: int, frame: Any) -> None:
        __tracebackhide__ = True
        item.stash[_GRACE] = grace
        signal.setitimer(signal.ITIMER_REAL, grace)  # the next stuck step of this phase; off at its end
        pytest_timeout.timeout_sigalrm(item, settings)

    def end_the_run() -> None:
        sys.stderr.write(
            f"\n{item.nodeid} is still running {backstop_after:.0f} s after its {settings.timeout} s"
            " timeout and cannot be interrupted: ending the run\n"
        )
        pytest_timeout.timeout_timer(item, settings)  # every thread's stack, then os._exit(1)

    backstop = threading.Timer(settings.timeout + backstop_after, end_the_run)
    backstop.daemon = True

    def stop() -> None:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, signal.SIG_DFL)
        backstop.cancel()

    item.stash[_STOP] = stop
    # What the plugin calls when a phase fails: only a debugging session stops the alarm there.
    item.cancel_timeout = lambda: stop() if item.config.getoption("usepdb") else None  # type: ignore[attr-defined]
    signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, settings.timeout)
    backstop.start()
    return True


def _timed_out_phase(item: pytest.Item) -> Iterator[None]:
    """A phase of a test that already timed out gets the grace; the alarm is off while pytest
    reports (an alarm there is pytest's INTERNALERROR, the run's end)."""
    grace = item.stash.get(_GRACE, None)
    if grace is not None:
        signal.setitimer(signal.ITIMER_REAL, grace)
    try:
        yield
    finally:
        if item.stash.get(_GRACE, None) is not None:
            signal.setitimer(signal.ITIMER_REAL, 0)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    yield from _timed_out_phase(item)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    yield from _timed_out_phase(item)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Iterator[None]:
    yield from _timed_out_phase(item)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    """The alarm and the backstop end with the test's last phase, whatever happened in it."""
    try:
        yield
    finally:
        stop = item.stash.get(_STOP, None)
        if stop is not None:
            stop()
