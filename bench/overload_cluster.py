"""`python -m bench.overload_cluster`: overload across two processes (docs/overload.md#capacity-refusals).

The case an audit drove: a model with `concurrency: {initial: 5, min: 1, max: 40}` in front of a mock
that serves at most C = 10 calls at once (100 ms each) and answers 429 beyond; `max_retries: 0`; two
orgs of equal weight, each with 5 interactive clients and 20 batch clients (`X-Switchboard-Max-Wait: 1`),
50 closed-loop clients (5x C) spread over two uvicorn gateways on one Redis (a redis-server of its own,
on a free port). `--outage` kills that Redis 10 s into the run and starts it again, empty, 10 s later.
Reported: interactive success, answers by code (`circuit_open` = a breaker opened), requests served
per org and Jain's index, goodput, the share of upstream calls that met a 429, the latency of shed
answers, and the load average beside them; and `inversions`: batch calls that began upstream while an
interactive request somewhere in the cluster had been waiting (docs/overload.md#capacity-refusals).
tests/e2e/test_overload_cluster_e2e.py runs the same scenario scaled down (`Cluster`, `load`, `figures`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import subprocess
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import aiohttp

from bench.overload import SERVICE_MS, _client, _mock_calls, _pct, _script, jain
from bench.procs import Proc, free_port, manage, prepare_database, start_gateway, start_mock

C = 10
ORGS = ("org-a", "org-b")
CLIENTS = (("interactive", 5), ("batch", 20))  # per org
# An interactive request may wait for a slot of its own process to free (one call's hold, SERVICE_MS) while
# another process, where no interactive request waits, starts a batch call: the processes' limits are their
# own, shared through Redis rounds, not one queue. Past that, a batch call starting while it still waits is
# an inversion. GRACE_S covers the gateway's own time around the call and the clients' reading of the clock.
GRACE_S = 0.05
# The first seconds of a run, while the processes' limits find the capacity from their `initial` (slow start,
# the first refusals: a process may halve while the other still grows), are left out of `inversions`; they
# show in the 429 share and the interactive success, which count the whole run.
SETTLE_S = 2.0


def _config(url: str) -> str:
    orgs = "".join(
        f"  - name: {o}\n    agents:\n      - name: inter\n        priority: interactive\n"
        "      - name: batch\n        priority: batch\n"
        for o in ORGS
    )
    return f"""
resilience:
  max_retries: 0
providers:
  - name: mock
    dialect: openai
    base_url: {url}/v1
models:
  - id: ov
    provider: mock
    upstream_model: ov
    capabilities: [chat]
    concurrency: {{initial: 5, min: 1, max: 40}}
orgs:
{orgs}"""


class _Redis:
    """A redis-server of this run's own: killed and started again empty for `--outage`."""

    def __init__(self, work: Path) -> None:
        self.port, self.work = free_port(), work
        self.proc = self._start()

    def _start(self) -> subprocess.Popen:
        argv = ["redis-server", "--port", str(self.port), "--save", "", "--appendonly", "no"]
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(0.3)
        return proc

    def outage(self, after_s: float, down_s: float) -> None:
        """Kill it `after_s` from now; start it again, empty, `down_s` later (in a thread of the caller's)."""
        time.sleep(after_s)
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        time.sleep(down_s)
        self.proc = self._start()

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait()


async def _load(
    urls: list[str], keys: dict[tuple[str, str], str], seconds: float, clients: tuple = CLIENTS
) -> list[tuple]:
    out: list[tuple] = []
    until = time.monotonic() + seconds
    clients = [(org, cls) for org in ORGS for cls, n in clients for _ in range(n)]
    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0), timeout=timeout) as session:
        await asyncio.gather(
            *(_client(session, urls[i % 2], keys[who], who[0], who[1], until, out) for i, who in enumerate(clients))
        )
    return out


def inversions(rows: list[tuple], grace: float = GRACE_S, settle: float = SETTLE_S) -> int:
    """Batch calls that began upstream while an interactive request somewhere had been waiting longer than
    one call's hold (the rows' clocks: a served call began SERVICE_MS before its answer came back), from
    `settle` seconds into the run."""
    service = SERVICE_MS / 1000
    after = min((r[5] for r in rows), default=0.0) + settle
    waits = [
        (r[5] + service + grace, r[5] + r[4] - service - grace) for r in rows if r[1] == "interactive" and r[2] == 200
    ]
    waits = [(lo, hi) for lo, hi in waits if lo < hi]
    began = [b for r in rows if r[1] == "batch" and r[2] == 200 and (b := r[5] + r[4] - service) >= after]
    return sum(any(lo < b < hi for lo, hi in waits) for b in began)


def figures(rows: list[tuple], seconds: float, calls: int, refused: int) -> dict[str, Any]:
    """The run's figures from the clients' rows and the mock's count of calls and of 429s."""
    inter = [r for r in rows if r[1] == "interactive"]
    served = Counter(r[0] for r in rows if r[2] == 200)
    shed = [r[4] for r in rows if r[3] == "overloaded"]
    return {
        "interactive_success": round(sum(r[2] == 200 for r in inter) / len(inter), 4),
        "codes": dict(Counter(r[3] or "ok" for r in rows)),
        "served_by_org": {o: served.get(o, 0) for o in ORGS},
        "jain": round(jain([served.get(o, 0) for o in ORGS]), 3),
        "goodput_rps": round(sum(served.values()) / seconds, 1),
        "upstream_calls": calls,
        "upstream_429_share": round(refused / calls, 4) if calls else None,
        "shed_p50_ms": round(1000 * (_pct(shed, 0.5) or 0), 1),
        "shed_p99_ms": round(1000 * (_pct(shed, 0.99) or 0), 1),
        "interactive_served": sum(r[1] == "interactive" and r[2] == 200 for r in rows),
        "batch_served": sum(r[1] == "batch" and r[2] == 200 for r in rows),
        "inversions": inversions(rows),
        "loadavg": Path("/proc/loadavg").read_text().split()[:3],
    }


def _keys(env: dict[str, str], first: str) -> dict[tuple[str, str], str]:
    keys = {("org-a", "interactive"): first}
    for org in ORGS:
        for cls, agent in (("interactive", "inter"), ("batch", "batch")):
            if (org, cls) not in keys:
                keys[(org, cls)] = manage(["create_api_key", "--org", org, "--agent", agent], env).split()[-1]
    return keys


class Cluster:
    """The scenario's parts: the hard-capacity mock, a Redis of its own, one database with the four keys
    (org x class) and two uvicorn gateways on that Redis. `start()` again after `stop()` gives fresh
    gateways and a fresh Redis on the same database and mock."""

    def __init__(self) -> None:
        self.work = Path(tempfile.mkdtemp(prefix="switchboard-overload-cluster-"))
        self.mock, self.mock_url = start_mock(self.work)
        try:
            _script(self.mock_url, C)
            self.env, key = prepare_database(self.work, "ovc", _config(self.mock_url), "org-a", "inter")
            self.keys = _keys(self.env, key)
        except BaseException:
            self.mock.stop()
            raise
        self.redis: _Redis | None = None
        self.procs: list[tuple[Proc, str]] = []

    def start(self) -> None:
        self.redis = _Redis(self.work)
        cluster_env = {**self.env, "REDIS_URL": f"redis://127.0.0.1:{self.redis.port}/0"}
        self.procs = [start_gateway("uvicorn", f"gateway-{n}", self.work, cluster_env) for n in "ab"]
        time.sleep(1.5)  # both processes counted in Redis

    def run(self, seconds: float, outage: tuple[float, float] | None = None, clients: tuple = CLIENTS) -> dict:
        """Closed-loop load for `seconds`; `outage`: (after, down) seconds, Redis killed then started empty."""
        assert self.redis is not None
        if outage is not None:
            threading.Thread(target=self.redis.outage, args=outage, daemon=True).start()
        before = _mock_calls(self.mock_url)
        rows = asyncio.run(_load([u for _, u in self.procs], self.keys, seconds, clients))
        after = _mock_calls(self.mock_url)
        calls, refused = after["count"] - before["count"], after["over_capacity"] - before["over_capacity"]
        return figures(rows, seconds, calls, refused)

    def stop(self) -> None:
        for proc, _ in self.procs:
            proc.stop()
        self.procs = []
        if self.redis is not None:
            self.redis.stop()
            self.redis = None

    def close(self) -> None:
        self.stop()
        self.mock.stop()


def run(seconds: float, outage: bool) -> dict[str, Any]:
    cluster = Cluster()
    try:
        cluster.start()
        return cluster.run(seconds, (10.0, 10.0) if outage else None)
    finally:
        cluster.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=20.0, help="length of the run")
    parser.add_argument("--outage", action="store_true", help="Redis killed at 10 s, restarted empty at 20 s")
    args = parser.parse_args()
    seconds = max(args.seconds, 30.0) if args.outage else args.seconds
    print(json.dumps(run(seconds, args.outage)), flush=True)


if __name__ == "__main__":
    main()
