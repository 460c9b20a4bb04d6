"""Shared test fixtures."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests import services

pytest_plugins = ("tests.hangs",)


@pytest.fixture(autouse=True, scope="session")
def _spool_in_a_temporary_directory(tmp_path_factory: pytest.TempPathFactory) -> None:
    """In-process tests write usage journals and the last good configuration somewhere of
    their own, never into the working tree's var/ (the e2e servers get their own dirs)."""
    from django.conf import settings

    settings.SWITCHBOARD_USAGE_SPOOL_DIR = str(tmp_path_factory.mktemp("spool"))


@pytest.fixture(autouse=True, scope="session")
def _no_background_tasks_in_process(_spool_in_a_temporary_directory: None) -> Iterator[Any]:
    """The session's serving process, built by the composition root as a server builds its own,
    without background tasks: in-process tests call the ASGI handler directly; the per-process
    background tasks (usage writer, config listener, prober) run in the real servers of tests/e2e."""
    from gateway_project.process import build_process, dispose

    session = build_process(background=False)
    yield session
    # Records queued by in-process requests belong to no database; never flush them at exit.
    dispose(session)


@pytest.fixture(autouse=True)
def _no_breaker_left_open_in_the_session_process(_no_background_tasks_in_process: Any) -> Iterator[None]:
    """A test that opens or forces a breaker of the session's process must use its own `process`:
    left there, the state reaches whichever test runs next in the random order (a breaker test
    failed in CI only when it ran after one that forced its link). Fails the leaking test by name
    and closes the breakers (their gauges with them), so the next test starts closed either way."""
    yield
    breakers = _no_background_tasks_in_process.breakers
    links, views = [v for v in breakers.views() if v.state], [v for v in breakers.org_views() if v.state]
    left = [f"{v.key.link} {v.state.name.lower()}" for v in links]
    left += [f"{v.key.link}@{v.org} {v.state.name.lower()}" for v in views]
    for key in {v.key for v in [*links, *views]}:
        breakers.reset(key)  # through the listeners: the circuit gauges go back to closed too
    breakers.clear()
    assert not left, (
        f"this test left breakers of the session's process not closed ({', '.join(left)}): give it the `process` fixture"
    )


@pytest.fixture
def session_process(_no_background_tasks_in_process: Any) -> Any:
    """The session's serving process (the one current outside a test's own `process`)."""
    return _no_background_tasks_in_process


@pytest.fixture
def process() -> Iterator[Any]:
    """A whole serving process of this test's own (its breakers, picker, gates, feed, overload settings,
    spend loader, sink...), installed as the current one for the test, then taken down; the session's
    comes back after. Every part is the process's, so the two share nothing (tests/test_globals.py)."""
    from gateway_project.process import build_process, dispose, reinstall
    from routing.runtime.process import current

    previous = current()
    own = build_process(background=False)
    try:
        yield own
    finally:
        dispose(own)
        reinstall(previous)


@pytest.fixture(autouse=True, scope="session")
def _close_stray_test_database_sessions(django_db_setup, django_db_blocker) -> Iterator[None]:
    """Writer threads of the usage tests keep their own connections; end them so the test
    database can be dropped (PostgreSQL refuses while other sessions use it)."""
    yield
    from django.db import connection

    with django_db_blocker.unblock():
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                    " WHERE datname = current_database() AND pid <> pg_backend_pid()"
                )
        connection.close()


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A PostgreSQL server for tests that need a real one: the environment's, else a throwaway
    one started here for the session; skipped with the reason when neither can be had."""
    url, server = services.postgres_server()
    yield url
    if server is not None:
        server.stop()


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """A Redis for tests that need a real one: the environment's, else a throwaway redis-server
    for the session; skipped with the reason when neither can be had."""
    url, server = services.redis_server()
    yield url
    if server is not None:
        server.stop()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--reverse",
        action="store_true",
        help="run the collected tests in reverse order (with -p no:randomly): finds tests that pass only after others",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--reverse"):
        items.reverse()
