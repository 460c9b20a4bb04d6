"""Which paths the gateway answers itself: everything that looks like /v1, so a typo gets a JSON 404."""

from __future__ import annotations

import pytest

from routing.gateway.paths import is_gateway_path


@pytest.mark.parametrize(
    "path",
    [
        "/v1",
        "/v1/",
        "/V1",
        "/v1/chat/completions",
        "/V1/Chat/Completions",
        "//v1/chat/completions",
        "///v1",
        "/v1//x",
        "/health",
        "/health/providers",
    ],
)
def test_api_looking_paths_belong_to_the_gateway(path: str) -> None:
    assert is_gateway_path(path)


@pytest.mark.parametrize("path", ["/", "/admin/", "/dashboard/", "/metrics", "/v1abc", "/v2/chat", "/static/v1/x", ""])
def test_other_paths_go_to_django(path: str) -> None:
    assert not is_gateway_path(path)
