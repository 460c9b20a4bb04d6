"""/metrics: the gateway's series move with breakers, requests and probes; access rules."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from prometheus_client.parser import text_string_to_metric_families

from routing.runtime.observe import metrics
from routing.runtime.process import current
from tests.core.breakers import breaker_settings


def scrape(client) -> dict[tuple[str, tuple], float]:
    response = client.get("/metrics")
    assert response.status_code == 200
    out = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def circuit(values, provider, model):
    return values.get(("switchboard_circuit_state", (("model", model), ("provider", provider))))


@pytest.mark.django_db
def test_circuit_state_follows_the_breaker(client, snapshot):
    key = ("op-a", "op-chat")
    assert circuit(scrape(client), "op-a", "op-chat") == 0
    assert circuit(scrape(client), "op-b", "op-chat-b") == 0  # every configured link is exported

    with breaker_settings(current().breakers, 2, 60):
        for _ in range(2):
            current().breakers.record_failure(key, probe=False)
    assert circuit(scrape(client), "op-a", "op-chat") == 1

    current().breakers.reset(key)
    with breaker_settings(current().breakers, 1, 0):
        current().breakers.record_failure(key, probe=False)  # cooldown over at once
    assert circuit(scrape(client), "op-a", "op-chat") == 2  # half-open

    current().breakers.reset(key)
    assert circuit(scrape(client), "op-a", "op-chat") == 0

    current().breakers.force_open(key, "maintenance", None)
    assert circuit(scrape(client), "op-a", "op-chat") == 1


@pytest.mark.django_db
def test_byo_breaker_is_labelled_with_the_orgs_hash_by_default(client, snapshot):
    with breaker_settings(current().breakers, 1, 60):
        current().breakers.record_failure(("op-a", "op-chat", "org:acme"), probe=False)
    response = client.get("/metrics")
    assert "acme" not in response.content.decode()  # a tenant name, on a page that is public by default
    values = scrape(client)
    hashed = metrics.org_label("acme")
    assert hashed.startswith("org-") and len(hashed) == 16
    assert circuit(values, "op-a", f"op-chat@{hashed}") == 1
    assert circuit(values, "op-a", "op-chat") == 0


@pytest.mark.django_db
def test_byo_breaker_is_labelled_with_the_org_when_the_operator_turns_names_on(client, snapshot, settings):
    settings.SWITCHBOARD_METRICS_ORG_NAMES = True
    with breaker_settings(current().breakers, 1, 60):
        current().breakers.record_failure(("op-a", "op-chat", "org:acme"), probe=False)
    assert circuit(scrape(client), "op-a", "op-chat@acme") == 1


def test_the_org_label_is_a_keyed_hash_stable_for_one_secret_key(settings):
    first = metrics.org_label("acme")
    assert first == metrics.org_label("acme") != metrics.org_label("beta")
    settings.SECRET_KEY = "another-deployment-key"
    assert metrics.org_label("acme") != first  # not a plain hash anyone can recompute from a list of names


@pytest.mark.parametrize("names", [False, True])
def test_an_orgs_view_of_a_link_is_labelled_by_the_setting(snapshot, settings, names):
    settings.SWITCHBOARD_METRICS_ORG_NAMES = names
    metrics.on_org_breaker_change(("op-b", "op-chat-b"), "zeta-corp", 0, 1)
    org = "zeta-corp" if names else metrics.org_label("zeta-corp")
    assert org.startswith("org-") != names
    assert metrics.CIRCUIT_ORG_STATE.labels("op-b", "op-chat-b", org)._value.get() == 1


def test_breaker_listener_sets_the_gauge_immediately(snapshot):
    key = ("op-b", "op-chat-b")
    with breaker_settings(current().breakers, 1, 60):
        current().breakers.record_failure(key, probe=False)
    assert metrics.CIRCUIT_STATE.labels("op-b", "op-chat-b")._value.get() == 1
    current().breakers.reset(key)
    assert metrics.CIRCUIT_STATE.labels("op-b", "op-chat-b")._value.get() == 0


@pytest.mark.django_db
def test_requests_attempts_fallbacks_and_overhead(client, snapshot):
    before = scrape(client)
    metrics.observe_request("chat", "op-fast", "op-chat-b", 200, 0.0003, fallback_reason="upstream_5xx")
    metrics.observe_request("chat", "no-such-model-xyz", "", 404, 0.0001)
    observer = metrics.MetricsObserver()
    link = SimpleNamespace(model=SimpleNamespace(id="op-chat", provider=SimpleNamespace(name="op-a")))
    observer.attempt(link, "upstream_5xx")
    observer.fallback("op-chat", "op-chat-b", "upstream_5xx")
    after = scrape(client)

    def delta(name, **labels):
        key = (name, tuple(sorted(labels.items())))
        return after.get(key, 0) - before.get(key, 0)

    assert (
        delta("switchboard_requests_total", endpoint="chat", model="op-fast", model_used="op-chat-b", status="200") == 1
    )
    assert delta("switchboard_requests_total", endpoint="chat", model="(unknown)", model_used="", status="404") == 1
    assert not any("no-such-model-xyz" in str(k) for k in after)
    assert delta("switchboard_upstream_attempts_total", provider="op-a", model="op-chat", outcome="upstream_5xx") == 1
    assert delta("switchboard_fallbacks_total", from_model="op-chat", to_model="op-chat-b", reason="upstream_5xx") == 1
    assert delta("switchboard_overhead_seconds_count") == 2
    assert delta("switchboard_overhead_seconds_bucket", le="0.00025") == 1


@pytest.mark.django_db
def test_config_reloads_provider_up_and_usage_backlog(client, snapshot):
    before = scrape(client)
    assert ("switchboard_config_reloads_total", (("result", "rejected"),)) in before
    metrics.config_reloaded(False)
    metrics.provider_status("op-a", True)
    metrics.provider_status("op-b", False)
    sink = current().usage
    sink.record(request_id="metrics-backlog-1", status=200)
    sink.record(request_id="metrics-backlog-2", status=200)
    try:
        after = scrape(client)
        assert (
            after[("switchboard_config_reloads_total", (("result", "rejected"),))]
            == before[("switchboard_config_reloads_total", (("result", "rejected"),))] + 1
        )
        assert after[("switchboard_provider_up", (("provider", "op-a"),))] == 1
        assert after[("switchboard_provider_up", (("provider", "op-b"),))] == 0
        assert after[("switchboard_usage_backlog", ())] == sink.backlog() >= 2
    finally:
        sink._pending.clear()
    metrics.provider_status("op-a", None)
    assert ("switchboard_provider_up", (("provider", "op-a"),)) not in scrape(client)


@pytest.mark.django_db
def test_the_backlog_gauge_reads_the_process_installed_again_after_a_test_s_own(client, session_process):
    """A test's own process is built (its sink behind the gauge), disposed, and the session's installed
    again: the gauge must read the session's sink, not the disposed one's (it read 0 against 2 in CI)."""
    from gateway_project.process import build_process, dispose, reinstall

    own = build_process(background=False)
    dispose(own)
    reinstall(session_process)
    sink = session_process.usage
    sink.record(request_id="metrics-reinstalled-1", status=200)
    sink.record(request_id="metrics-reinstalled-2", status=200)
    try:
        assert scrape(client)[("switchboard_usage_backlog", ())] == sink.backlog() >= 2
    finally:
        sink._pending.clear()


@pytest.mark.django_db
def test_metrics_restricted_to_staff_when_not_public(client, settings, staff_user, plain_user):
    settings.SWITCHBOARD_METRICS_PUBLIC = False
    response = client.get("/metrics")
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "forbidden"
    client.force_login(plain_user)
    assert client.get("/metrics").status_code == 403
    client.force_login(staff_user)
    response = client.get("/metrics")
    assert response.status_code == 200 and b"switchboard_circuit_state" in response.content


@pytest.mark.django_db
def test_metrics_public_by_default(client, settings):
    settings.SWITCHBOARD_METRICS_PUBLIC = True
    assert client.get("/metrics").status_code == 200
