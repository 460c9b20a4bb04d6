"""The dashboard's process list: heartbeats, alive/stale, version mismatches, where the list comes from."""

from __future__ import annotations

import asyncio
import os
import socket
import uuid

import pytest

from routing.config import live
from routing.core.breaker import BreakerRegistry
from routing.runtime.cluster import process_list
from routing.runtime.process import Tally


def beat(pid: int, at: float, version: int = 3, interval_s: float = 1.0, host: str = "h1", worker: int = 0) -> dict:
    return {
        "id": f"{host}:{pid}",
        "host": host,
        "pid": pid,
        "server": "uvicorn",
        "worker": worker,
        "started_at": at - 60,
        "at": at,
        "interval_s": interval_s,
        "version": version,
        "in_flight": 0,
        "served": 10,
        "rps": 1.0,
        "open": [],
        "open_count": 0,
    }


# --------------------------------------------------------------------------- pure list


def test_a_process_goes_stale_after_missed_heartbeats_and_drops_off_later():
    now = 10_000.0
    listed = process_list.summarize(
        [
            beat(1, now - 0.5),
            beat(2, now - process_list.STALE_BEATS * 1.0 - 0.1),  # missed five beats
            beat(3, now - process_list.GONE_S - 1),  # gone for good
            beat(4, now - 3.0, interval_s=2.0),  # slower heartbeat, not late for it
        ],
        now,
    )
    states = {row["pid"]: row["state"] for row in listed["processes"]}
    assert states == {1: "alive", 4: "alive", 2: "stale"}
    assert (listed["alive"], listed["stale"]) == (2, 1)
    assert [row["pid"] for row in listed["processes"]][-1] == 2  # live ones first
    assert {row["pid"]: row["uptime_s"] for row in listed["processes"]}[1] == 60


def test_a_live_process_on_another_configuration_version_is_flagged():
    now = 5_000.0
    listed = process_list.summarize(
        [beat(1, now, version=8), beat(2, now, version=7), beat(3, now - 60, version=6)], now
    )
    flags = {row["pid"]: row["version_mismatch"] for row in listed["processes"]}
    assert listed["latest_version"] == 8
    assert flags == {1: False, 2: True, 3: False}  # a stale process is stale, not "mismatched"


def test_unreadable_records_are_skipped():
    assert process_list.summarize([{"pid": 1}, {"at": "soon"}], 1.0)["processes"] == []


def test_heartbeat_record_counts_requests_and_their_rate(monkeypatch):
    tally = Tally()
    heart = process_list.Heart(None, now=100.0, tally=tally)
    tally.served = 20
    tally.in_flight = 3
    record = heart.record(102.0, ["mock/m1"])
    assert record["id"] == f"{socket.gethostname()}:{os.getpid()}"
    assert (record["served"], record["in_flight"], record["rps"]) == (20, 3, 10.0)
    assert record["open"] == ["mock/m1"] and record["open_count"] == 1
    assert record["started_at"] == 100.0 and record["worker"] == 0
    tally.served = 25
    assert heart.record(107.0, [])["rps"] == 1.0


def test_workers_take_the_lowest_free_index_and_a_replacement_reuses_it(tmp_path, monkeypatch):
    first, held = process_list.worker_slot(tmp_path)
    second, other = process_list.worker_slot(tmp_path)  # another open file: flock conflicts like another process
    assert (first, second) == (0, 1)
    held.close()  # worker 0 died
    again, handle = process_list.worker_slot(tmp_path)
    assert again == 0
    handle.close()
    other.close()


# --------------------------------------------------------------------------- where the list comes from


def test_without_redis_the_machines_workers_are_listed_from_the_shared_directory(tmp_path, monkeypatch, settings):
    settings.REDIS_URL = ""
    monkeypatch.setenv(process_list.MULTIPROC_ENV, str(tmp_path))
    now = process_list.clock()
    process_list.write_file(tmp_path, beat(11, now, worker=0))
    process_list.write_file(tmp_path, beat(12, now - 30, worker=1))
    (tmp_path / "heartbeat-13.json").write_text("{half a reco")  # a worker's file being replaced
    listed = process_list.listing(now)
    assert listed["source"] == "machine" and listed["error"] is None
    assert {row["pid"]: row["state"] for row in listed["processes"]} == {11: "alive", 12: "stale"}


def test_one_process_without_redis_lists_itself(monkeypatch, settings):
    settings.REDIS_URL = ""
    monkeypatch.delenv(process_list.MULTIPROC_ENV, raising=False)
    listed = process_list.listing()
    assert listed["source"] == "process"
    assert [row["pid"] for row in listed["processes"]] == [os.getpid()]
    assert listed["processes"][0]["state"] == "alive"


def test_redis_unreachable_says_so_and_still_lists_this_process(monkeypatch, settings):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # nothing listens here once closed
    settings.REDIS_URL = f"redis://127.0.0.1:{port}/0"
    settings.SWITCHBOARD_SHARED_TIMEOUT_S = 0.3
    monkeypatch.delenv(process_list.MULTIPROC_ENV, raising=False)
    listed = process_list.listing()
    assert listed["error"].startswith("Redis is unreachable")
    assert listed["source"] == "process" and listed["processes"][0]["pid"] == os.getpid()


def test_with_redis_every_process_of_the_cluster_is_listed(redis_url, monkeypatch, settings):
    import redis.asyncio as aioredis

    settings.REDIS_URL = redis_url
    settings.SWITCHBOARD_CLUSTER = f"test-{uuid.uuid4().hex[:8]}"
    now = process_list.clock()

    async def write() -> None:
        client = aioredis.Redis.from_url(redis_url)
        try:
            await process_list.write_redis(client, settings.SWITCHBOARD_CLUSTER, beat(21, now, host="a"), now)
            await process_list.write_redis(client, settings.SWITCHBOARD_CLUSTER, beat(22, now, 4, host="b"), now)
            await process_list.write_redis(client, "another-cluster", beat(23, now, host="c"), now)
        finally:
            await client.aclose()

    asyncio.run(write())
    try:
        listed = process_list.listing(now + 1)
        assert listed["source"] == "redis" and listed["error"] is None
        assert {(r["host"], r["pid"]) for r in listed["processes"]} == {("a", 21), ("b", 22)}
        assert {r["pid"]: r["version_mismatch"] for r in listed["processes"]} == {21: True, 22: False}
    finally:
        client = process_list._redis_client(redis_url)
        client.delete(*(client.keys(process_list.REDIS_PREFIX + settings.SWITCHBOARD_CLUSTER + "*") or ["-"]))
        client.delete(*(client.keys(process_list.REDIS_PREFIX + "another-cluster*") or ["-"]))


def test_the_cluster_defaults_to_the_processes_sharing_a_database(settings):
    settings.SWITCHBOARD_CLUSTER = ""
    pg = {"ENGINE": "django.db.backends.postgresql", "HOST": "db1", "PORT": 5432, "NAME": "switchboard"}
    assert process_list.cluster_name(pg) == process_list.cluster_name(dict(pg))
    assert process_list.cluster_name(pg) != process_list.cluster_name({**pg, "NAME": "staging"})
    assert process_list.cluster_name() == process_list.cluster_name(settings.DATABASES["default"])
    settings.SWITCHBOARD_CLUSTER = "eu-west"
    assert process_list.cluster_name() == "eu-west"


# --------------------------------------------------------------------------- the endpoint and the page


@pytest.mark.django_db
def test_process_list_endpoint_is_staff_only_like_the_dashboard(client, snapshot, staff_user, plain_user, settings):
    settings.REDIS_URL = ""
    response = client.get("/dashboard/processes/")
    assert response.status_code == 302 and "/admin/login/" in response["Location"]
    client.force_login(plain_user)
    assert client.get("/dashboard/processes/").status_code == 403
    client.force_login(staff_user)
    response = client.get("/dashboard/processes/")
    assert response.status_code == 200 and response["Content-Type"] == "application/json"
    data = response.json()
    assert data["alive"] == 1 and data["processes"][0]["pid"] == os.getpid()
    assert data["processes"][0]["version"] == 7  # the snapshot fixture's configuration version (not its reload 3)
    html = client.get("/dashboard/").content.decode()
    assert 'id="process-list" data-url="/dashboard/processes/"' in html


# --------------------------------------------------------------------------- the background task


async def test_heartbeat_keeps_beating_to_the_machine_while_redis_is_down_and_says_so_once(
    tmp_path, monkeypatch, settings, caplog
):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    settings.REDIS_URL = f"redis://127.0.0.1:{port}/0"
    settings.SWITCHBOARD_HEARTBEAT_S = 0.02
    settings.SWITCHBOARD_SHARED_TIMEOUT_S = 0.2
    monkeypatch.setenv(process_list.MULTIPROC_ENV, str(tmp_path))
    beat = process_list.Heartbeat()
    beats: list[float] = []
    task = asyncio.get_running_loop().create_task(beat.run(Tally(), BreakerRegistry()))
    try:
        for _ in range(400):  # bounded: 400 × 10 ms
            await asyncio.sleep(0.01)
            path = tmp_path / f"heartbeat-{os.getpid()}.json"
            if path.exists():
                at = process_list.read_files(tmp_path)[0]["at"]
                if not beats or at != beats[-1]:
                    beats.append(at)
            if len(beats) >= 10:
                break
        assert len(beats) >= 10, f"only {len(beats)} heartbeats written"
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        if beat.heart is not None and beat.heart.slot is not None:
            beat.heart.slot.close()
    warnings = [r for r in caplog.records if "Redis unreachable" in r.getMessage()]
    assert len(warnings) == 1
    assert live.degraded["redis"] is True
    live.set_degraded("redis", False, "heartbeat")
    assert beat.last_record["worker"] == 0 and beat.last_record["pid"] == os.getpid()


async def test_heartbeat_resumes_by_itself_when_redis_comes_back(tmp_path, monkeypatch, settings):
    """Redis down at start, then up: the beats reach it and the degraded flag clears (own redis-server)."""
    import shutil
    import subprocess

    import redis.asyncio as aioredis

    server = shutil.which("redis-server")
    if not server:
        from tests.services import REDIS_MISSING

        pytest.skip(REDIS_MISSING)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    settings.REDIS_URL = f"redis://127.0.0.1:{port}/0"
    settings.SWITCHBOARD_HEARTBEAT_S = 0.02
    settings.SWITCHBOARD_SHARED_TIMEOUT_S = 0.2
    settings.SWITCHBOARD_CLUSTER = "resume-test"
    monkeypatch.delenv(process_list.MULTIPROC_ENV, raising=False)
    beat = process_list.Heartbeat()
    task = asyncio.get_running_loop().create_task(beat.run(Tally(), BreakerRegistry()))
    redis_server = None
    client = aioredis.Redis.from_url(settings.REDIS_URL)
    try:
        for _ in range(300):  # bounded: 3 s
            if live.degraded.get("redis"):
                break
            await asyncio.sleep(0.01)
        assert live.degraded.get("redis") is True
        redis_server = subprocess.Popen(
            [server, "--bind", "127.0.0.1", "--port", str(port), "--save", "", "--appendonly", "no"],
            stdout=subprocess.DEVNULL,
        )
        index = process_list.REDIS_PREFIX + "resume-test"
        for _ in range(1500):  # bounded: 15 s (the retry backoff is at most 10 s)
            try:
                if await client.zscore(index, f"{socket.gethostname()}:{os.getpid()}") is not None:
                    break
            except Exception:  # noqa: BLE001 - still starting
                pass
            await asyncio.sleep(0.01)
        assert await client.zscore(index, f"{socket.gethostname()}:{os.getpid()}") is not None
        for _ in range(100):
            if not live.degraded.get("redis"):
                break
            await asyncio.sleep(0.01)
        assert live.degraded.get("redis") is False
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await client.aclose()
        if beat.client is not None:
            await beat.client.aclose()
        if redis_server is not None:
            redis_server.terminate()
            redis_server.wait(timeout=10)
        live.set_degraded("redis", False, "heartbeat")
