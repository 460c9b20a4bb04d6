"""`python -m bench.overload_cluster`: overload across two processes (docs/overload.md#capacity-refusals).

The case an audit drove: a model with `concurrency: {initial: 5, min: 1, max: 40}` in front of a mock
that serves at most C = 10 calls at once (100 ms each) and answers 429 beyond; `max_retries: 0`; two
orgs of equal weight, each with 5 interactive clients and 20 batch clients (`X-Switchboard-Max-Wait: 1`),
50 closed-loop clients (5x C) spread over two uvicorn gateways on one Redis (a redis-server of its own,
on a free port). `--outage` kills that Redis 10 s into the run and starts it again, empty, 10 s later.
Reported: interactive success, answers by code (`circuit_open` = a breaker opened), requests served
per org and Jain's index, goodput, the share of upstream calls that met a 429, the latency of shed
answers, and the load average beside them.
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

from bench.overload import _client, _mock_calls, _pct, _script, jain
from bench.procs import free_port, manage, prepare_database, start_gateway, start_mock

C = 10
ORGS = ("org-a", "org-b")
CLIENTS = (("interactive", 5), ("batch", 20))  # per org


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
        time.sleep(after_s)
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        time.sleep(down_s)
        self.proc = self._start()

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait()


async def _load(urls: list[str], keys: dict[tuple[str, str], str], seconds: float) -> list[tuple]:
    out: list[tuple] = []
    until = time.monotonic() + seconds
    clients = [(org, cls) for org in ORGS for cls, n in CLIENTS for _ in range(n)]
    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0), timeout=timeout) as session:
        await asyncio.gather(
            *(_client(session, urls[i % 2], keys[who], who[0], who[1], until, out) for i, who in enumerate(clients))
        )
    return out


def _figures(rows: list[tuple], seconds: float, calls: int, refused: int) -> dict[str, Any]:
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
        "loadavg": Path("/proc/loadavg").read_text().split()[:3],
    }


def _keys(env: dict[str, str], first: str) -> dict[tuple[str, str], str]:
    keys = {("org-a", "interactive"): first}
    for org in ORGS:
        for cls, agent in (("interactive", "inter"), ("batch", "batch")):
            if (org, cls) not in keys:
                keys[(org, cls)] = manage(["create_api_key", "--org", org, "--agent", agent], env).split()[-1]
    return keys


def run(seconds: float, outage: bool) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="switchboard-overload-cluster-"))
    mock, mock_url = start_mock(work)
    redis = _Redis(work)
    try:
        _script(mock_url, C)
        env, key = prepare_database(work, "ovc", _config(mock_url), "org-a", "inter")
        keys = _keys(env, key)
        cluster_env = {**env, "REDIS_URL": f"redis://127.0.0.1:{redis.port}/0"}
        procs = [start_gateway("uvicorn", f"gateway-{n}", work, cluster_env) for n in "ab"]
        try:
            time.sleep(1.5)  # both processes counted in Redis
            if outage:
                threading.Thread(target=redis.outage, args=(10.0, 10.0), daemon=True).start()
            before = _mock_calls(mock_url)
            rows = asyncio.run(_load([u for _, u in procs], keys, seconds))
            after = _mock_calls(mock_url)
        finally:
            for proc, _ in procs:
                proc.stop()
        calls, refused = after["count"] - before["count"], after["over_capacity"] - before["over_capacity"]
        return _figures(rows, seconds, calls, refused)
    finally:
        redis.stop()
        mock.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=20.0, help="length of the run")
    parser.add_argument("--outage", action="store_true", help="Redis killed at 10 s, restarted empty at 20 s")
    args = parser.parse_args()
    seconds = max(args.seconds, 30.0) if args.outage else args.seconds
    print(json.dumps(run(seconds, args.outage)), flush=True)


if __name__ == "__main__":
    main()
