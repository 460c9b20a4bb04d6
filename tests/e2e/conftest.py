"""Fixtures for end-to-end tests against real processes on loopback."""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.e2e.harness import Databases, Gateway, MockUpstream


@pytest.fixture(scope="session")
def mock_upstream() -> Iterator[MockUpstream]:
    mock = MockUpstream()
    yield mock
    mock.stop()


@pytest.fixture(scope="session")
def databases() -> Iterator[Databases]:
    dbs = Databases()
    yield dbs
    dbs.cleanup()


@pytest.fixture(scope="module")
def make_gateway(databases: Databases) -> Iterator[Callable[..., Gateway]]:
    """Start gateways with a given YAML configuration; all are stopped at module end."""
    started: list[Gateway] = []

    def factory(config_yaml: str, org: str = "acme", agent: str = "bot", env: dict[str, str] | None = None) -> Gateway:
        gateway = Gateway(
            database_url=databases.new(),
            config_yaml=config_yaml,
            workdir=Path(tempfile.mkdtemp(prefix="switchboard-gw-")),
            extra_env=env or {},
        )
        started.append(gateway)
        gateway.start(org=org, agent=agent)
        return gateway

    yield factory
    for gateway in started:
        gateway.stop()
