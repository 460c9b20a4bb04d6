"""The mock upstream's tests share the upstream floor's fixtures (the mock in-process, a fresh transport)."""

from tests.upstream.conftest import mock, transport  # noqa: F401
