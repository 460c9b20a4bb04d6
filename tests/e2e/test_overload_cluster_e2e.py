"""Overload across two serving processes on one Redis (docs/overload.md#capacity-refusals), end to end.

The scenario of `python -m bench.overload_cluster`, scaled down in time only (the same clients, the
same capacity): a mock that serves at most 10 calls at once and answers 429 beyond, a model with an
adaptive limit and `max_retries: 0`, two orgs of equal weight with interactive and batch clients
(`X-Switchboard-Max-Wait: 1`) spread over two uvicorn gateways. Everything asserted is a count: the
capacity refusals stay a signal to the limits (no breaker opens, few reach the upstream), the orgs are
served alike, interactive requests are served, and no batch call begins while an interactive request
waits; with Redis killed and started again empty mid-run, interactive requests are still served.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import pytest

from bench.overload_cluster import CLIENTS, Cluster

pytestmark = pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs redis-server")

STEADY_S = 10.0
OUTAGE = (3.0, 3.0)  # Redis killed 3 s into the run, started again empty 3 s later
OUTAGE_RUN_S = 13.0
# measured 0 to 3 % of batch calls at a load average of 8-10 (9-38 % before the seats left learnt limits alone)
INVERSION_SHARE = 0.05


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    """One cluster for both runs (its start is most of the test's time); each run is measured on its own."""
    c = Cluster()
    try:
        c.start()
        yield c
    finally:
        c.close()


def _common(f: dict, interactive: float) -> None:
    assert "circuit_open" not in f["codes"], f  # capacity refusals never open the link's breaker
    assert f["interactive_success"] >= interactive, f
    assert f["batch_served"] > 0, f  # batch was being served: the priority assertion means something


def test_capacity_fairness_and_priority_hold_across_two_processes(cluster: Cluster) -> None:
    f = cluster.run(STEADY_S)
    print("steady", f)
    _common(f, 0.99)
    assert f["upstream_429_share"] <= 0.03, f
    assert f["jain"] >= 0.95, f
    # interactive is served more than batch, client for client, and a batch call rarely begins while an
    # interactive request waits past one call's hold elsewhere in the cluster (docs/overload.md#capacity-refusals)
    per_client = dict(CLIENTS)
    assert f["interactive_served"] / per_client["interactive"] >= f["batch_served"] / per_client["batch"], f
    assert f["inversions"] <= INVERSION_SHARE * f["batch_served"], f


def test_redis_restarted_empty_mid_run_keeps_interactive_served_and_breakers_closed(cluster: Cluster) -> None:
    f = cluster.run(OUTAGE_RUN_S, OUTAGE)
    print("outage", f)
    _common(f, 0.95)
