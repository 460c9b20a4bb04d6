"""The dashboard shows one row per deployment, together under its model (docs/deployments.md#visibility)."""

from __future__ import annotations

import copy
import json
import os

import pytest

from routing.config import live
from routing.config.snapshot import build_snapshot
from routing.core.breaker import BreakerKey
from routing.runtime.process import current
from tests.core.breakers import breaker_settings
from tests.ops.conftest import DOCUMENT


@pytest.fixture
def spread_snapshot():
    doc = copy.deepcopy(DOCUMENT)
    doc["models"].append(
        {
            "id": "op-spread",
            "capabilities": ["chat"],
            "routing": "least_busy",
            "deployments": [
                {"provider": "op-b", "upstream_model": "m3", "weight": 2},
                {"provider": "op-a", "upstream_model": "m3"},
            ],
        }
    )
    previous = live.current()
    live.swap(build_snapshot(doc, [], os.environ, version=8))
    yield
    for key in (BreakerKey("op-a", "op-spread"), BreakerKey("op-b", "op-spread")):
        current().breakers.reset(key)
    live.swap(previous)


@pytest.mark.django_db
def test_each_deployment_is_a_row_with_its_breaker_grouped_under_the_model(client, spread_snapshot, staff_user):
    for _ in range(5):
        with breaker_settings(current().breakers, 5, 30.0):
            current().breakers.record_failure(BreakerKey("op-a", "op-spread"), False)
    client.force_login(staff_user)
    html = client.get("/dashboard/").content.decode()
    marker = '<script id="initial-state" type="application/json">'
    start = html.index(marker) + len(marker)
    links = json.loads(html[start : html.index("</script>", start)])["links"]
    names = [link["link"] for link in links]
    spread = [link for link in links if link["model"] == "op-spread"]
    assert [link["link"] for link in spread] == ["op-b/op-spread", "op-a/op-spread"]  # configuration order
    first = names.index("op-b/op-spread")
    assert names[first + 1] == "op-a/op-spread"  # adjacent: grouped under the model
    assert [s["state"] for s in spread] == ["closed", "open"]
    assert spread[0]["deployment"] == {
        "index": 1,
        "of": 2,
        "weight": 2,
        "routing": "least_busy",
        "in_flight": 0,
        "overload": None,  # no adaptive limit configured
    }
    assert all("deployment" not in link for link in links if link["model"] != "op-spread")


def test_a_deployment_breaker_may_be_controlled_and_an_unknown_provider_may_not(spread_snapshot):
    from routing.ops import controls

    control = controls.parse({"action": "reset", "key": ["op-a", "op-spread"]})
    assert control.key == BreakerKey("op-a", "op-spread")
    with pytest.raises(controls.ControlError, match="no configured link"):
        controls.parse({"action": "reset", "key": ["op-c", "op-spread"]})


def test_the_circuit_gauge_has_a_series_per_deployment(spread_snapshot):
    from prometheus_client import REGISTRY

    from routing.runtime.observe import metrics

    with breaker_settings(current().breakers, 1, 30.0):
        current().breakers.record_failure(BreakerKey("op-b", "op-spread"), False)
    metrics.refresh_circuits(live.current(), current().breakers.views())

    def value(provider: str) -> float | None:
        return REGISTRY.get_sample_value("switchboard_circuit_state", {"provider": provider, "model": "op-spread"})

    assert value("op-a") == 0 and value("op-b") == 1


@pytest.mark.django_db
def test_the_admin_explain_page_lists_the_deployments_with_live_figures(client, spread_snapshot, django_user_model):
    from routing.runtime.process import current

    user = django_user_model.objects.create_superuser("dep-op", password="pw-dep-123")
    client.force_login(user)
    for _ in range(2):
        current().picker.started(BreakerKey("op-b", "op-spread"))
    current().picker.observe(BreakerKey("op-b", "op-spread"), 0.25)
    try:
        html = client.get("/admin/explain-route/", {"org": "acme", "model": "op-spread", "kind": "chat"}).content
    finally:
        current().picker.clear()
    page = html.decode()
    assert 'data-deployment="op-b" data-next="false"' in page  # two in flight: least_busy takes the other
    assert 'data-deployment="op-a" data-next="true"' in page
    assert "in flight 2 · latency 250.0 ms" in page


@pytest.mark.django_db
def test_a_deployment_with_an_adaptive_limit_shows_its_limit_in_flight_and_queue(client, spread_snapshot, staff_user):
    from routing.runtime import overload

    doc = copy.deepcopy(DOCUMENT)
    doc["models"].append(
        {
            "id": "op-spread",
            "capabilities": ["chat"],
            "deployments": [{"provider": "op-b", "upstream_model": "m3"}, {"provider": "op-a", "upstream_model": "m3"}],
            "concurrency": {"initial": 7},
        }
    )
    previous = live.current()
    live.swap(build_snapshot(doc, [], os.environ, version=9))
    overload.apply(live.current())  # as the process's swap listener does
    try:
        gate = current().gates.gate(BreakerKey("op-b", "op-spread"), "op-spread", "op-spread@op-b")
        gate.inflight = 3
        client.force_login(staff_user)
        html = client.get("/dashboard/").content.decode()
        marker = '<script id="initial-state" type="application/json">'
        start = html.index(marker) + len(marker)
        links = json.loads(html[start : html.index("</script>", start)])["links"]
        row = next(link for link in links if link["link"] == "op-b/op-spread")
        assert row["deployment"]["overload"] == {"limit": 7, "inflight": 3, "queued": 0}
    finally:
        live.swap(previous)
        overload.apply(previous)
